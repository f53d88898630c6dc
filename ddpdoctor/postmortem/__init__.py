"""Post-mortem from torch's own records, for jobs that never ran under ddpdoctor: flight-recorder dumps
(``TORCH_FR_DUMP_TEMP_FILE<rank>``, pickle or JSON), torchrun error files (``@record``) and the job's
logs. Pure: no torch; nothing read is ever unpickled into objects or evaluated (``safepickle``).

``inputs.load(paths)`` reads what the paths hold; ``detect.findings(inputs)`` names the culprit;
``report.build(inputs, config)`` gives the same ``Report`` a live run gives.
"""
