"""Chaos tests against the real compose stack built from the working tree.

Containers are crashed (SIGKILL from the host) on a schedule drawn whole
from a seed before the scenario starts, and printed with the seed:
``SP_TEST_SEED=<seed> make test`` replays it (nothing is drawn while the
scenario runs, so how often a probe polls cannot change it). After each
scenario the producer's input is drained and checked: every event id is in
the files output and in the PostgreSQL table exactly once (no gaps, no
duplicates), and the per-symbol aggregates in PostgreSQL (upsert) equal a
batch computation over the whole log. The stack runs the compose default,
``pipelines/trades_postgres.py``: one scenario as it ships (one worker and
its standby), the others scaled out to two workers (a failure of one must
not stop the other). One scenario runs the kafka profile
(``docker/compose.kafka.yml``, ``pipelines/trades_kafka.py``): every id of
the input topic exactly once in PostgreSQL and in the output topic.

PostgreSQL crashes here land wherever they land; the crash inside a
publishing transaction and at its COMMIT, on either side of the server, is
made deterministic in ``tests/integration/test_postgres_commit.py``.
"""

from __future__ import annotations

import re

import pytest

from tests.chaos.compose import KAFKA_PROFILE, REPO, WORKER_SERVICES, ComposeStack
from tests.chaos.schedule import drawn, lone_worker_crashes, outages, takeovers, worker_crashes
from tests.support import all_published, vwap_differences, wait_until

pytestmark = pytest.mark.chaos

# The producer runs until a scenario ends; the log it wrote is the input:
# 2,000 events/s, at the shipped defaults (one worker and a standby, 1 s
# checkpoints and triggers, 500 ms for upserts, 1,000,000-record cap). Only
# the controller's checkpoints and the workers' reports come faster, so the
# test sees progress sooner.
SETTINGS = {"SP_CONTROLLER_CHECKPOINT_FREQ": "500", "SP_REPORT_INTERVAL": "500", "SP_PRODUCER_RATE": "2000"}
# Most scenarios scale out to two workers (docker-compose.yml's scale-out
# profile runs worker-1): one's crash must not stall the other.
SCALED_OUT = {**SETTINGS, "SP_WORKER_COUNT": "2", "COMPOSE_PROFILES": "scale-out"}


def running(stack: ComposeStack, index: int) -> dict | None:
    worker = stack.worker(index)
    return worker if worker and worker["state"] == "running" and worker["batch_id"] >= 0 else None


def checkpointed_since_restore(stack: ComposeStack, index: int) -> int:
    """Wait until the worker runs with a checkpoint newer than the one it
    restored; return that checkpoint's id."""
    worker = wait_until(lambda: (w := running(stack, index)) and w["last_checkpoint"] and
                        w["last_checkpoint"]["checkpoint_id"] > w["recovery"]["restored_checkpoint_id"] and w,
                        timeout_s=420, what=f"worker-{index} running with a new checkpoint")
    return worker["last_checkpoint"]["checkpoint_id"]


def resumed(stack: ComposeStack, index: int, checkpoint_id: int) -> dict:
    """Wait until the worker runs again, restored from ``checkpoint_id`` or a
    newer one. The controller still shows the killed run until the new one
    reports, but that run restored an older checkpoint than ``checkpoint_id``
    (it took ``checkpoint_id`` itself), so a stale record never passes."""
    return wait_until(lambda: (w := running(stack, index)) and
                      w["recovery"]["restored_checkpoint_id"] >= checkpoint_id and w,
                      timeout_s=420, what=f"worker-{index} to resume from checkpoint {checkpoint_id} or newer")


def start(stack: ComposeStack) -> None:
    stack.up("controller", "producer", "worker-0", "worker-1")
    for index in (0, 1):
        checkpointed_since_restore(stack, index)
    # With TLS on (issue 15): the workers registered over mutual TLS, and
    # reach PostgreSQL, which takes TLS only, verifying it (verify-full).
    assert b"(mutual TLS)" in stack.container("controller").logs()
    assert b"TLS on" in stack.container("postgres").logs()


def exact_aggregates(rows: list[dict], expected: dict, where: str) -> bool:
    """True once ``rows`` cover every event (trade counts equal); then the
    sums must be exact."""
    if {row["sym"]: row["trades"] for row in rows} != {sym: want["trades"] for sym, want in expected.items()}:
        return False
    differences = vwap_differences(rows, expected)
    assert not differences, f"{where}: {differences}"
    return True


OUTPUTS = {"files": "the files sink", "kafka": "the output topic", "pg": "PostgreSQL"}


def drained_and_exact(stack: ComposeStack, *, producer: str = "producer", output: str = "files") -> None:
    """Stop the producer and wait until all it wrote is published; then every
    event id is in ``output`` (the files sink; on the kafka profile, the
    output topic read ``read_committed``) and in the PostgreSQL table exactly
    once, and the upsert table equals a batch computation over the input."""
    read = stack.kafka_results if output == "kafka" else stack.results
    stack.compose("stop", "-t", "10", producer)
    last: dict = {}

    def caught_up() -> dict | None:
        last.update(results := read())
        return results if results[output]["missing"] == 0 and results["pg"]["missing"] == 0 else None
    try:
        results = wait_until(caught_up, timeout_s=600, what="every produced event in both sinks", interval_s=5)
    except AssertionError as timeout:
        raise AssertionError(f"{timeout}; last seen: {output} {last.get(output)}, PostgreSQL {last.get('pg')}") \
            from None
    assert results["events"] == results["distinct_events"] > 0, "the producer wrote an id twice"
    for sink in (output, "pg"):
        assert results[sink]["duplicated"] == [], f"event ids published twice to {OUTPUTS[sink]}"
        assert results[sink]["unknown"] == [], f"ids never produced published to {OUTPUTS[sink]}"
    expected = results["expected_vwap"]
    wait_until(lambda: (r := read()) and exact_aggregates(r["pg_vwap"], expected, "PostgreSQL vwap"),
               timeout_s=120, what="the aggregates to cover every event", interval_s=3)
    print(f"{results['events']} events: each exactly once in {OUTPUTS[output]} and PostgreSQL; aggregates exact")


def test_workers_crash_repeatedly_and_recover_while_the_other_keeps_going(stack):
    crashes = drawn(worker_crashes)
    compose = stack(**SCALED_OUT)
    start(compose)
    for round_, crash in enumerate(crashes):
        victim = crash.victim
        other = 1 - victim
        checkpoint = checkpointed_since_restore(compose, victim)
        restarts = compose.restart_count(f"worker-{victim}")
        # A drawn point: after 1-4 more batches of the victim (checkpoints every 1 s).
        target = compose.worker(victim)["batch_id"] + crash.batches
        wait_until(lambda: compose.worker(victim)["batch_id"] >= target, timeout_s=120,
                   what=f"worker-{victim} batch {target}")
        other_before = compose.worker(other)["batch_id"]
        print(f"round {round_}: crashing worker-{victim} at batch {compose.worker(victim)['batch_id']}")
        compose.crash(f"worker-{victim}")
        # The other worker is not stalled while the victim restarts.
        wait_until(lambda: compose.worker(other)["batch_id"] >= other_before + 3, timeout_s=120,
                   what=f"worker-{other} to keep advancing")
        wait_until(lambda: compose.restart_count(f"worker-{victim}") > restarts, timeout_s=60,
                   what=f"worker-{victim} restarted by its policy")
        back = resumed(compose, victim, checkpoint)
        print(f"round {round_}: worker-{victim} restored checkpoint {back['recovery']['restored_checkpoint_id']}")

    # Both at once.
    checkpoints = {index: checkpointed_since_restore(compose, index) for index in (0, 1)}
    print("crashing both workers at once")
    compose.crash("worker-0")
    compose.crash("worker-1")
    for index in (0, 1):
        resumed(compose, index, checkpoints[index])

    # Removed entirely and recreated: it restores from its volume, not from scratch.
    checkpoint = checkpointed_since_restore(compose, 1)
    compose.compose("rm", "-s", "-f", "worker-1")
    compose.up("worker-1")
    recreated = resumed(compose, 1, checkpoint)
    print(f"recreated worker-1 restored checkpoint {recreated['recovery']['restored_checkpoint_id']}")
    drained_and_exact(compose)


def the_standby(stack: ComposeStack, services: tuple[str, ...] = WORKER_SERVICES) -> str:
    """Wait until a worker container of ``services`` stands by, its Spark session up; its service."""
    return wait_until(lambda: next((s for s in services if stack.standing_by(s)), None), timeout_s=300,
                      what="a worker container standing by")


def the_standby_takes_over(compose: ComposeStack, crashes: tuple, services: tuple[str, ...]) -> None:
    """Crash the container running index 0 (the only worker) at each drawn
    point; each time the standby takes the index over."""
    for round_, crash in enumerate(crashes):
        checkpoint = checkpointed_since_restore(compose, 0)
        standby = the_standby(compose, services)
        runner = compose.runner_of(0)
        target = compose.worker(0)["batch_id"] + crash.batches
        wait_until(lambda: compose.worker(0)["batch_id"] >= target, timeout_s=120, what=f"worker-0 batch {target}")
        print(f"round {round_}: crashing {runner}, the only worker; {standby} stands by")
        compose.crash(runner)
        back = resumed(compose, 0, checkpoint)
        heir = compose.runner_of(0)
        print(f"round {round_}: {heir} runs index 0, restored checkpoint {back['recovery']['restored_checkpoint_id']}")
        assert heir == standby, f"index 0 went to {heir}, not to the standby {standby}"


def test_the_shipped_stack_of_one_worker_and_a_standby_loses_nothing_when_its_worker_crashes(stack):
    crashes = drawn(lone_worker_crashes)
    compose = stack(**SETTINGS)
    services = ("worker-0", "standby")
    compose.up("controller", "producer", *services)
    checkpointed_since_restore(compose, 0)
    the_standby_takes_over(compose, crashes, services)
    drained_and_exact(compose)


def test_a_standby_takes_over_crashed_workers_even_mid_takeover_and_its_own_crash_loses_nothing(stack):
    schedule = drawn(takeovers)
    compose = stack(**SCALED_OUT)
    compose.up("controller", "producer", "worker-0", "worker-1", "standby")
    for index in (0, 1):
        checkpointed_since_restore(compose, index)
    for round_, crash in enumerate(schedule.crashes):
        victim, other = crash.victim, 1 - crash.victim
        checkpoint = checkpointed_since_restore(compose, victim)
        standby = the_standby(compose)
        runner = compose.runner_of(victim)
        target = compose.worker(victim)["batch_id"] + crash.batches
        wait_until(lambda: compose.worker(victim)["batch_id"] >= target, timeout_s=120,
                   what=f"worker-{victim} batch {target}")
        registrations = compose.worker(victim)["registrations"]
        other_before = compose.worker(other)["batch_id"]
        print(f"round {round_}: crashing {runner}, which runs index {victim}; {standby} stands by")
        compose.crash(runner)
        if round_ == schedule.mid_takeover:
            # The standby registered for the index, and dies restoring it: the
            # crashed container, restarted, stands by and takes over in turn.
            wait_until(lambda: compose.worker(victim)["registrations"] > registrations, timeout_s=60,
                       what=f"{standby} to register as worker-{victim}", interval_s=0.1)
            assert compose.runner_of(victim) == standby
            print(f"round {round_}: crashing {standby} too, taking over index {victim}")
            compose.crash(standby)
        wait_until(lambda: compose.worker(other)["batch_id"] >= other_before + 3, timeout_s=120,
                   what=f"worker-{other} to keep advancing")
        back = resumed(compose, victim, checkpoint)
        heir = compose.runner_of(victim)
        print(f"round {round_}: {heir} runs index {victim}, restored checkpoint "
              f"{back['recovery']['restored_checkpoint_id']}")
        if round_ != schedule.mid_takeover:
            assert heir == standby, f"index {victim} went to {heir}, not to the standby {standby}"

    # The standby itself crashes: nobody stalls, and it stands by again.
    standby = the_standby(compose)
    batches = {index: compose.worker(index)["batch_id"] for index in (0, 1)}
    restarts = compose.restart_count(standby)
    compose.crash(standby)
    wait_until(lambda: compose.restart_count(standby) > restarts, timeout_s=60,
               what=f"{standby} restarted by its policy")
    for index in (0, 1):
        wait_until(lambda: compose.worker(index)["batch_id"] >= batches[index] + 3, timeout_s=120,
                   what=f"worker-{index} to keep advancing")
    assert the_standby(compose) == standby
    drained_and_exact(compose)


def test_a_paused_worker_is_taken_over_and_once_unpaused_writes_nothing_and_says_why(stack):
    compose = stack(**SCALED_OUT)
    compose.up("controller", "producer", "worker-0", "worker-1", "standby")
    for index in (0, 1):
        checkpointed_since_restore(compose, index)
    standby = the_standby(compose)
    runner = compose.runner_of(0)
    checkpoint = checkpointed_since_restore(compose, 0)
    # Where the pause lands is left to chance; paused inside a PostgreSQL
    # transaction, its locks would block the heir had it not ended that
    # session: made deterministic in tests/integration/test_postgres_sinks.py.
    print(f"pausing {runner}, which runs index 0; {standby} stands by")
    compose.pause(runner)
    try:
        # Silent for SP_HEARTBEAT_TIMEOUT (10 s), its lock is broken: the
        # standby takes index 0 over, and the other worker goes on meanwhile.
        other_before = compose.worker(1)["batch_id"]
        back = resumed(compose, 0, checkpoint)
        assert compose.runner_of(0) == standby
        wait_until(lambda: compose.worker(0)["batch_id"] >= back["batch_id"] + 3, timeout_s=120,
                   what=f"{standby} to go on with index 0")
        assert compose.worker(1)["batch_id"] >= other_before + 3
    finally:
        compose.container(runner).unpause()
    # Running again, the paused process finds its lock broken before any
    # write: it says why and stops (exit status 3); restarted by its
    # policy, it stands by. Its writes would show as duplicates or losses.
    wait_until(lambda: compose.standing_by(runner), timeout_s=300, what=f"{runner} standing by after it was unpaused")
    logs = compose.container(runner).logs().decode(errors="replace")
    assert re.search(r"error: checkpoint directory /var/lib/sparkpoint/checkpoints/0 was taken over by worker-0 "
                     r"\(pid \d+ on \w+\): .* it writes nothing more for index 0 and stops", logs), logs[-3000:]
    assert compose.runner_of(0) == standby
    drained_and_exact(compose)


def published_batches(stack: ComposeStack) -> int:
    """How many batches the workers' sinks have published in all."""
    return sum(sink["published_batch_id"] + 1 for worker in stack.status().get("workers", [])
               for sink in worker.get("sinks", []))


def test_controller_and_postgres_crash_while_workers_go_on(stack):
    schedule = drawn(outages)
    compose = stack(**SCALED_OUT)
    start(compose)
    before = {i: compose.worker(i) for i in (0, 1)}
    print("crashing the controller")
    compose.crash("controller")
    # The controller is back by policy and reports every worker's newer batches
    # and checkpoints: they kept processing and checkpointing while it was down.
    for index in (0, 1):
        wait_until(lambda: (w := running(compose, index)) and w["batch_id"] > before[index]["batch_id"] + 2
                   and w["last_checkpoint"]["checkpoint_id"] > before[index]["last_checkpoint"]["checkpoint_id"]
                   and w["heartbeat_age_s"] < 10, timeout_s=180, what=f"worker-{index} progress after the crash")
    assert compose.restart_count("controller") >= 1

    # PostgreSQL crashes at drawn points (after 1-6 more published batches):
    # the sinks wait, retry, and publish again.
    for crash, after in enumerate(schedule.postgres_after):
        published = published_batches(compose)
        wait_until(lambda: published_batches(compose) >= published + after, timeout_s=180,
                   what=f"{after} more batches published")
        restarts = compose.restart_count("postgres")
        print(f"crashing PostgreSQL ({crash + 1})")
        compose.crash("postgres")
        wait_until(lambda: compose.restart_count("postgres") > restarts, timeout_s=60,
                   what="PostgreSQL restarted by its policy")
        published = published_batches(compose)
        wait_until(lambda: published_batches(compose) > published, timeout_s=300,
                   what="the sinks to publish again after PostgreSQL came back")

    # A worker crashing while the controller is down: it comes back once the controller is.
    victim = schedule.victim
    checkpoint = checkpointed_since_restore(compose, victim)
    compose.compose("stop", "-t", "1", "controller")
    print(f"controller stopped; crashing worker-{victim}")
    compose.crash(f"worker-{victim}")
    compose.up("controller")
    resumed(compose, victim, checkpoint)
    drained_and_exact(compose)


# The kafka profile: the producer writes 500 events/s to the topic (the test
# broker keeps every record in memory and saves them all each second).
KAFKA_SETTINGS = {**SETTINGS, "SP_PRODUCER_RATE": "500"}


def test_on_kafka_worker_crashes_a_broker_restart_and_a_controller_crash_lose_and_duplicate_nothing(
        stack, kafka_images):
    crashes = drawn(lone_worker_crashes)
    compose = stack(files=KAFKA_PROFILE, **KAFKA_SETTINGS)
    services = ("worker-0", "standby")
    compose.up("controller", "kafka-producer", *services)
    checkpointed_since_restore(compose, 0)
    # The worker crashes: the standby takes its index over (its producer fences the crashed one's).
    the_standby_takes_over(compose, crashes, services)

    # The broker restarts (cleanly: it saves its data at SIGTERM): reads and publishes wait, then go on.
    # The producer is stopped meanwhile: this broker loses records it acknowledges during its stop
    # (tests/integration/test_kafka_broker.py), and the input must hold every id it acknowledged.
    published = published_batches(compose)
    print("restarting the Kafka broker (its producer stopped)")
    compose.compose("stop", "-t", "10", "kafka-producer")
    compose.compose("restart", "-t", "30", "kafka")
    compose.up("kafka-producer")
    wait_until(lambda: published_batches(compose) > published + 5, timeout_s=300,
               what="the sinks to publish again after the broker came back")

    # The controller crashes: the worker goes on, and reports again once it is back.
    before = compose.worker(0)
    print("crashing the controller")
    compose.crash("controller")
    wait_until(lambda: (w := running(compose, 0)) and w["batch_id"] > before["batch_id"] + 2
               and w["last_checkpoint"]["checkpoint_id"] > before["last_checkpoint"]["checkpoint_id"]
               and w["heartbeat_age_s"] < 10, timeout_s=180, what="worker-0 progress after the crash")
    drained_and_exact(compose, producer="kafka-producer", output="kafka")


# The windows pipeline: trades up to 3 s out of order at 500 a second, and
# once the first batches ran, one in a hundred ten minutes late (a query's
# first batch has no watermark yet: nothing in it is late).
WINDOWS_SETTINGS = {**SETTINGS, "SP_PIPELINE": "/opt/sparkpoint/pipelines/trades_windows.py",
                    "SP_PRODUCER_RATE": "500", "SP_PRODUCER_DISORDER": "3"}


def test_the_windows_pipeline_through_worker_and_postgres_crashes_emits_every_bar_once_and_exactly(stack):
    crashes = drawn(lone_worker_crashes)
    compose = stack(**WINDOWS_SETTINGS)
    compose.up("postgres")
    wait_until(lambda: compose.container("postgres").exec_run(["sparkpoint-postgres", "healthcheck"]).exit_code == 0,
               timeout_s=120, what="PostgreSQL to take connections")
    compose.psql((REPO / "pipelines" / "symbols.sql").read_text())     # the join's reference table
    services = ("worker-0", "standby")
    compose.up("controller", "producer", *services)
    checkpointed_since_restore(compose, 0)
    compose.env["SP_PRODUCER_LATE_FRACTION"] = "0.01"
    compose.up("producer")      # recreated with late trades; it goes on after the log's last id
    the_standby_takes_over(compose, crashes[:1], services)     # once: the other scenarios take over more

    published = published_batches(compose)
    print("crashing PostgreSQL")
    compose.crash("postgres")
    wait_until(lambda: published_batches(compose) > published + 3, timeout_s=300,
               what="the sinks to publish again after PostgreSQL came back")

    # Drained: the producer stopped, everything read and published; the
    # windows the last watermark passed are final.
    compose.compose("stop", "-t", "10", "producer")
    last: dict = {}

    def settled() -> dict | None:
        worker = compose.worker(0)
        if not (worker and all_published(compose.status())):
            return None
        last.update(results := compose.windows_results())
        return results if results["joined_missing"] == 0 and not results["bars_missing"] else None
    try:
        results = wait_until(settled, timeout_s=600, what="every trade joined and every due bar emitted",
                             interval_s=5)
    except AssertionError as timeout:
        raise AssertionError(f"{timeout}; last seen: {last}") from None
    print(f"{results['events']} trades ({results['late']} late), {results['bars_due']} bars due")
    assert results["late"] > 0 and results["bars_due"] > 0
    for problem in ("bars_twice", "bars_early", "bars_unknown", "bars_wrong", "volumes_wrong", "joined_twice",
                    "joined_unknown", "joined_wrong"):
        assert results[problem] == [], f"{problem}: {results[problem]}"
