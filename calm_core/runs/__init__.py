"""The run-directory protocol and the background jobs that write run directories.

process (is a recorded pid alive, here) <- state (the state machine and the state to
show) <- rundir (RunDir: every file of a run, written one way; its parts layout, naming,
damage, metrics_lines, status_writes, checkpoint_dirs sit below it) <- listing (all runs, one
summary each) <- jobs (a job's record, job.json, and its process: start, kill) <- queue
(a runs root's queue: submit, schedule, cancel, resume). Below training: the trainer
writes through it, the studio reads it."""
