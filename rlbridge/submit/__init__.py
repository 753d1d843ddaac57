"""`rlbridge submit CONFIG --to slurm|kuberay`: a run as a job of a batch system (job.py: what every target
shares; slurm.py: an sbatch script; kuberay.py: a RayJob, checked against the pinned CRD schema in schemas/).
Above the run: the job runs `rlbridge train` on the cluster's nodes."""
