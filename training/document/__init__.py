"""`attnserve-train document`: a document head learned over a served model's windows."""
