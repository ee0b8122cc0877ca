"""Dynamic clients: sessions, the pilot model and the similarity-weighted initial model."""
