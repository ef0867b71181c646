"""A module that reads the job's secret when it is imported: gorun's warning
about it must not show the value (the torchrun compatibility tests)."""
import os

SECRET_AT_IMPORT = os.environ.get("GORUN_JOB_SECRET")
