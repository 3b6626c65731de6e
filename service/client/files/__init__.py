"""Files in, files out: classify every row of a CSV, JSONL or Parquet file (`classify_file`,
`attnserve-client classify --input FILE --output FILE`)."""

from attnserve.service.client.files.calls import Retry
from attnserve.service.client.files.job import classify_file
from attnserve.service.client.files.spec import FileJob, JobReport
from attnserve.service.client.files.tables import FileError

__all__ = ["FileError", "FileJob", "JobReport", "Retry", "classify_file"]
