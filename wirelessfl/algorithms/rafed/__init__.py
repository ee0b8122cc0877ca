"""RA-Fed / RAM-Fed: resource-adaptive submodels, their mask policies and baselines."""
