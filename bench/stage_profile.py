"""The project's own cost per stage, without Celery: the five stage bodies run through the
redelivery guard (``run_stage``) one session after another in this process, against an embedded
Redis, with the local runtime and a ``true`` agent (the orchestration benchmark's sessions).
Prints CPU microseconds per stage, Redis round trips per stage, and optionally a cProfile.

    .venv/bin/python bench/stage_profile.py [--sessions 200] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import redis  # noqa: E402

from bench.orchestration_bench import bench_home  # noqa: E402
from infra.embedded_redis import EmbeddedRedis  # noqa: E402
from pipeline.schemas import TaskRequest  # noqa: E402
from pipeline.settings import Settings  # noqa: E402
from pipeline.status import Stage  # noqa: E402
from workers.stages.bodies import BODIES  # noqa: E402
from workers.stages.common import make_deps, run_stage  # noqa: E402

FS_EVENTS = {"open", "os.mkdir", "os.rmdir", "os.remove", "os.rename", "os.symlink", "os.link", "os.scandir",
             "os.listdir", "shutil.rmtree", "shutil.copyfile", "subprocess.Popen"}


class CountingConnection(redis.Connection):
    sent = 0

    def send_packed_command(self, command, check_health=True):  # one call per round trip
        CountingConnection.sent += 1
        return super().send_packed_command(command, check_health)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--stage", choices=[s.value for s in Stage], help="profile this stage only")
    parser.add_argument("--sort", default="cumulative", help="cProfile sort key (cumulative, tottime)")
    parser.add_argument("--fs", action="store_true", help="count filesystem operations per stage (audit hooks)")
    args = parser.parse_args()
    with EmbeddedRedis() as server, tempfile.TemporaryDirectory(dir=bench_home()) as home:
        d = make_deps(Settings(home=Path(home), redis_url=server.url, inflight_drain_seconds=0))
        d.stores.r.connection_pool.connection_class = CountingConnection
        d.stores.r.connection_pool.reset()
        task = {"instruction": "noop", "num_samples": args.sessions, "runtime": {"backend": "local"},
                "agent": {"custom_shell": {"command": "true"}}, "builder": {"strategy": "per_request"},
                "evaluator": {"strategy": "session_completed"}}
        warm = d.stores.tasks.create(TaskRequest.model_validate({**task, "num_samples": 5}))
        for spec in warm:
            for stage in Stage:
                run_stage(stage, spec.session_id, *BODIES[stage], d=d)
        specs = d.stores.tasks.create(TaskRequest.model_validate(task))
        cpu = {s: 0.0 for s in Stage}
        trips = {s: 0 for s in Stage}
        fs: dict[Stage, dict[str, int]] = {s: {} for s in Stage}
        current: list[Stage | None] = [None]
        if args.fs:
            def hook(event: str, _args: tuple) -> None:
                if current[0] is not None and event in FS_EVENTS:
                    counts = fs[current[0]]
                    counts[event] = counts.get(event, 0) + 1
            sys.addaudithook(hook)
        prof = cProfile.Profile(time.process_time) if args.profile else None  # CPU, not wall: waits on Redis are not cost
        for spec in specs:
            for stage in Stage:
                before, sent = time.process_time(), CountingConnection.sent
                current[0] = stage
                profiling = prof is not None and args.stage in (None, stage.value)
                if profiling:
                    prof.enable()
                out = run_stage(stage, spec.session_id, *BODIES[stage], d=d)
                if profiling:
                    prof.disable()
                current[0] = None
                cpu[stage] += time.process_time() - before
                trips[stage] += CountingConnection.sent - sent
                assert out == "done", (stage, out)
        n = len(specs)
        print(f"{n} sessions, in-process (no Celery), local runtime, agent `true`:")
        for stage in Stage:
            ops = ", ".join(f"{k} {v / n:.1f}" for k, v in sorted(fs[stage].items())) if args.fs else ""
            print(f"  {stage.value:<9} {1e6 * cpu[stage] / n:8.0f} us CPU   {trips[stage] / n:5.1f} round trips   {ops}")
        print(f"  {'all':<9} {1e6 * sum(cpu.values()) / n:8.0f} us CPU   {sum(trips.values()) / n:5.1f} round trips")
        if prof:
            pstats.Stats(prof).sort_stats(args.sort).print_stats(45)


if __name__ == "__main__":
    main()
