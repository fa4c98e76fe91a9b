"""What ``data.path`` holds, read into pairs: its files, a reader per format, the records skipped."""
