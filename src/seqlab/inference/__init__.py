"""Using a trained model on text: decode and score a test set (evaluation), translate lines and streams
(text), look inside one decoding (inspection)."""
