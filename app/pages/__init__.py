"""The studio's pages, one package each: the page script (named as the package, so its URL
stays the page's name) and the helpers only that page uses. The router names them in
app/navigation.py; it runs from app/server/, so this folder is not beside the main script
and Streamlit's legacy `pages/` multipage mode never applies."""
