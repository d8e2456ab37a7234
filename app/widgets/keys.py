"""Streamlit session-state keys that pages read or write outside their own widgets, named
once: a page that sets one (Train sets MONITOR_RUN on launch) and the page that reads it
(Monitor opens that run) cannot drift apart by a typo. Widget keys that only their own
widget uses stay beside the widget."""

MONITOR_RUN = "monitor_run"  # the run the Monitor opens: this session's last launch or last look
MONITOR_METRICS_TAILS = "monitor_metrics_tails"  # per run, the metrics.jsonl tail already read
CALIBRATE_SPLIT = "calibrate_split"  # Data -> Train: the split whose parts prefill the Train page
DATA_LAST_SPLIT = "data_last_split"  # the split this session saved last (Data's "Calibrate this dataset")
DATA_MAP_FILE = "data_map_file"  # the upload whose column mapping the Data page last guessed
DATA_NAME_FILE = "data_name_file"  # the upload whose name the Data page last suggested under "Save as"
DATA_SPLIT_SOURCE = "data_split_source"  # the split form's source (also its selectbox's key)
COMPARE_MORE_DONE = "compare_more_done"  # Compare: the "evaluated on more data" message for the next run
LEARN_TEMPERATURE = "learn_temperature"  # Learn: the temperature slider's value, set by its buttons too
