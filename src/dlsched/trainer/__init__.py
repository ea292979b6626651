"""The elastic trainer the live runtime launches: `python -m dlsched.trainer --help`.

Every run resumes from the newest good checkpoint in its job directory whatever its number of workers and
parameter servers, so a resize is "SIGTERM, checkpoint, relaunch at the new size".
"""
