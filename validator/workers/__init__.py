"""Evaluation workers: model replicas that score peers away from the validator process.

`replica.Replica` is a plain class (no Ray) holding one model replica that advances itself from the
archive; `ray_pool.RayPool` runs one long-lived Ray actor per device around it; `pool.LocalPool` is
the same contract in-process. Only the validator process writes the database and the chain: workers
read the archive and the dataset, and return evaluations.
"""
