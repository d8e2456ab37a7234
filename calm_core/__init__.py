"""calm_core: the CALM Studio library.

Layers (imports only go down): data -> models / prompts -> scoring -> metrics / posthoc
-> evaluate -> cli. No Streamlit import anywhere in this package.
"""

__version__ = "0.1.0"
