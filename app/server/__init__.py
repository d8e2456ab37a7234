"""The studio's server side: the front door and the in-app gate, the upload quota, the
warm-up and the page router that app/main.py serves."""
