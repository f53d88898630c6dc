"""The folder the launcher form puts in front of PYTHONPATH: it holds only ``sitecustomize.py`` (and this
file, which makes it part of the wheel; a folder on ``sys.path`` does not import its own ``__init__``)."""
