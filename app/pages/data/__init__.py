"""The Data page: uploads, splits and lm-evaluation-harness samples."""
