"""The OpenRLHF adapter's tests that need OpenRLHF installed: the compat cells run them in its engine environment
(rlbridge.envs.compat); in rlbridge's own environment they skip."""
