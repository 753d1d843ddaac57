"""Comparing runs: `rlbridge bench` (A/B runs of one job across engines, versions or settings: arms.py runs them,
report.py judges them), `rlbridge report` (one HTML page over run directories: html_report.py) and `rlbridge
reproduce` (a finished run rerun and compared step by step: reproduce.py). Above the run: each arm is a run."""
