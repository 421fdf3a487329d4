"""Models the real runs train, shared by the kinds whose papers use the same benchmark."""
