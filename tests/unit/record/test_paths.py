"""Whose code a path is (record/paths.py): the script's folder is always the user's, ``<frozen>`` and
``<string>`` never, library folders and library markers not."""

from __future__ import annotations

from ddpdoctor.record.paths import LIB_MARKERS, is_user_path


def test_user_and_library_paths() -> None:
    assert is_user_path("/work/train.py", lib_markers=LIB_MARKERS)
    assert not is_user_path("<frozen runpy>", user_dirs=("/",))
    assert not is_user_path("/venv/lib/python3.11/site-packages/torch/nn/module.py", lib_markers=LIB_MARKERS)
    assert not is_user_path("/usr/lib/python3.11/threading.py", lib_markers=LIB_MARKERS)


def test_the_scripts_folder_wins_over_markers_and_library_folders_lose() -> None:
    # a project checked out under site-packages-like folders is still the user's when the script is there
    script_dir = ("/opt/site-packages/myproj/",)
    assert is_user_path("/opt/site-packages/myproj/train.py", user_dirs=script_dir, lib_markers=LIB_MARKERS)
    assert not is_user_path("/opt/conda/envs/x/tool.py", lib_dirs=("/opt/conda/",))
    assert is_user_path("/home/me/tool.py", lib_dirs=("/opt/conda/",))
