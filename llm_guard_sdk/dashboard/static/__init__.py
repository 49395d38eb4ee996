"""The dashboard's page, script and style sheet, shipped as package data (read by ``page.py``)."""
