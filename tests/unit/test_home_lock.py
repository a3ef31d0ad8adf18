"""One running stack per POLAR_HOME (infra/home_lock.py): the lock names its holder and dies with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from infra.home_lock import HomeInUse, HomeLockError, claim_home, release


def test_a_second_claim_is_refused_naming_the_holder_and_a_release_frees_the_home(tmp_path):
    fd = claim_home(tmp_path)
    with pytest.raises(HomeInUse, match=f"pid {os.getpid()}"):
        claim_home(tmp_path)
    release(fd)
    release(claim_home(tmp_path))


def test_a_holder_killed_with_sigkill_leaves_no_stale_lock(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from pathlib import Path; "
                               "from infra.home_lock import claim_home; claim_home(Path(sys.argv[1])); "
                               "print('held', flush=True); time.sleep(60)", str(tmp_path)],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(HomeInUse, match=f"pid {holder.pid}"):
        claim_home(tmp_path)
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=10)
    release(claim_home(tmp_path))


def test_a_link_in_place_of_the_lock_file_is_not_followed(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    (tmp_path / "stack.lock").symlink_to(target)
    with pytest.raises(HomeLockError, match="stack.lock"):
        claim_home(tmp_path)
    assert target.read_text() == "keep"
