"""The trainer side of a result: GRPO groups and advantages (``groups.py``) and plain-data
adapters to slime, verl and SkyRL (``slime.py``, ``verl.py``, ``skyrl.py``), using those
projects' documented field names without importing them. Pure: results in, data out."""
