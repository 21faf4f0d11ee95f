"""How pages print dates and times (settings.FORMAT_MODULE_PATH): ISO-like and unambiguous.

Django's English formats print "Nov. 27, 2026, 7:19 a.m.", which reads oddly before a full stop
("a.m..") and beside the API's ISO 8601 times; pages print "2026-11-27 07:19 UTC" instead.
"""
DATETIME_FORMAT = "Y-m-d H:i T"
DATE_FORMAT = "Y-m-d"
TIME_FORMAT = "H:i"
SHORT_DATETIME_FORMAT = "Y-m-d H:i"
SHORT_DATE_FORMAT = "Y-m-d"
