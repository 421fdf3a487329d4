"""The shared launcher: ranks get torchrun's environment, join a gloo group on the launcher's store and
all-reduce; a rank that fails, exits non-zero or is killed fails the launch with its rank named, and
no rank outlives the call."""

from __future__ import annotations

import os
import signal
import time

import pytest
from clustertwin.runtime.launch import RankFailure, join, launch, report

ENV = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")


def _all_reduce(rank: int, base: int) -> None:
    import torch
    import torch.distributed as dist

    member = join()
    total = torch.tensor([float(base + rank)])
    dist.all_reduce(total)
    member.store.set(f"seen/{rank}", "1")  # the group's store is usable beside the group
    report((rank, {k: os.environ[k] for k in ENV}, member.world, total.item(), os.getpid()))
    dist.barrier()
    dist.destroy_process_group()


def test_ranks_see_their_environment_and_all_reduce() -> None:
    items = launch(_all_reduce, 3, (10,))
    assert sorted(i[0] for i in items) == [0, 1, 2]
    ports = {i[1]["MASTER_PORT"] for i in items}
    assert len(ports) == 1 and int(ports.pop()) > 0
    for rank, env, world, total, pid in items:
        assert env["RANK"] == env["LOCAL_RANK"] == str(rank)
        assert env["WORLD_SIZE"] == "3" and world == 3
        assert env["MASTER_ADDR"] == "127.0.0.1"
        assert total == 10 + 11 + 12
        assert pid != os.getpid()


def _fail(rank: int, how: str) -> None:
    join()
    if rank == 1:
        time.sleep(0.5)
        if how == "exit":
            os._exit(3)
        if how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise ValueError("rank 1 gives up")
    import torch.distributed as dist

    dist.barrier()  # blocks on rank 1 until the launcher stops this rank


def _alive(pids: list[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] not in "ZX":
                    out.append(pid)
        except OSError:
            pass
    return out


@pytest.mark.parametrize(
    ("how", "words"),
    [("exit", "(exit code 3)"), ("kill", "(killed by SIGKILL)"), ("raise", "ValueError: rank 1 gives up")],
)
def test_a_dead_rank_fails_the_launch_by_name_and_leaves_no_child(how: str, words: str) -> None:
    started: list = []
    began = time.monotonic()
    with pytest.raises(RankFailure) as caught:
        launch(_fail, 3, (how,), roles=["a", "b", "c"], on_start=started.extend)
    assert time.monotonic() - began < 60.0  # the survivors were stopped, not left to a gloo timeout
    err = caught.value
    assert err.rank == 1 and err.role == "b"
    assert str(err).startswith("b (rank 1) died during the run") and words in str(err), str(err)
    assert all(code is not None for code in err.exitcodes)
    assert _alive([p.pid for p in started]) == []


def _hang(rank: int) -> None:
    time.sleep(60)


def test_a_launch_past_its_limit_is_stopped() -> None:
    started: list = []
    with pytest.raises(RankFailure, match="past its 1 s limit") as caught:
        launch(_hang, 2, limit_s=1.0, on_start=started.extend)
    assert caught.value.rank == -1
    assert _alive([p.pid for p in started]) == []
