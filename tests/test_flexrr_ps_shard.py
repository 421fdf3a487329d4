"""The real parameter-server shard's bookkeeping (``runtime/flexrr/ps.py``) on a scripted message
stream, in one process: an iteration is applied only once every worker declared it and every declared
range arrived (in any order), a read is answered only then, and a range pushed twice is refused."""

from __future__ import annotations

from collections import deque

import pytest
import torch
from clustertwin.runtime.flexrr import ps


class Done:
    def wait(self) -> bool:
        return True


class ScriptedGroup:
    """Delivers a scripted list of (tag, tensor) messages in order; records what the shard sends."""

    def __init__(self, messages: list[tuple[int, torch.Tensor]]) -> None:
        self.inbox = deque(messages)
        self.sent: list[tuple[int, int, torch.Tensor]] = []

    def _next(self, buf: torch.Tensor, tag: int) -> Done:
        got_tag, tensor = self.inbox.popleft()
        assert got_tag == tag
        buf.copy_(tensor)
        return Done()

    def recv_anysource(self, bufs: list[torch.Tensor], tag: int) -> Done:
        return self._next(bufs[0], tag)

    def recv(self, bufs: list[torch.Tensor], src: int, tag: int) -> Done:
        return self._next(bufs[0], tag)

    def send(self, bufs: list[torch.Tensor], dst: int, tag: int) -> Done:
        self.sent.append((dst, tag, bufs[0].clone()))
        return Done()


def push(worker: int, k: int, owner: int, start: int, values: list[float]) -> list:
    return [
        (ps.HEADER_TAG, ps._header(ps.PUSH, k, owner, start, 0, worker)),
        (ps.DATA_TAG, torch.tensor(values)),
    ]


def done(worker: int, k: int, starts: list[int]) -> list:
    return [
        (ps.HEADER_TAG, ps._header(ps.DONE, k, worker, 0, len(starts), worker)),
        (ps.DATA_TAG, torch.tensor(starts, dtype=torch.int64)),
    ]


def pull(worker: int, need: int) -> list:
    return [(ps.HEADER_TAG, ps._header(ps.PULL, need, worker, 0, 0, worker))]


def stop(worker: int) -> list:
    return [(ps.HEADER_TAG, ps._header(ps.STOP, 0, worker, 0, 0, worker))]


def test_shard_applies_complete_iterations_and_answers_reads_then():
    # 2 workers, one shard of a 2-parameter model; worker 1 helped worker 0 with range 50
    script = (
        pull(1, 1)  # too early: answered once iteration 0 is applied
        + push(0, 0, 0, 0, [1.0, 0.0])
        + done(0, 0, [0, 50])  # declares a range whose push (by the helper) is still on its way
        + push(1, 0, 1, 100, [0.0, 2.0])
        + done(1, 0, [100])
        + push(1, 0, 0, 50, [0.5, 0.5])  # the helper's push completes iteration 0
        + stop(0)
        + stop(1)
    )
    group = ScriptedGroup(script)
    updates = ps.serve(group, 0, 1, 2, 2, torch.float32)
    torch.testing.assert_close(updates, [torch.tensor([1.5, 2.5])])
    assert [(dst, tag) for dst, tag, _ in group.sent] == [(1, ps.REPLY_TAG + 1)]
    torch.testing.assert_close(group.sent[0][2], torch.tensor([1.5, 2.5]))


def test_a_range_pushed_twice_is_refused():
    script = push(0, 0, 0, 0, [1.0]) + push(1, 0, 0, 0, [1.0]) + stop(0) + stop(1)
    with pytest.raises(RuntimeError, match="pushed twice"):
        ps.serve(ScriptedGroup(script), 0, 1, 2, 1, torch.float32)


def test_a_push_no_worker_declared_is_refused():
    script = push(0, 0, 0, 0, [1.0]) + push(0, 0, 0, 7, [1.0]) + done(0, 0, [0]) + stop(0)
    with pytest.raises(RuntimeError, match="no worker declared"):
        ps.serve(ScriptedGroup(script), 0, 1, 1, 1, torch.float32)


def test_machines_get_their_own_loopback_address():
    assert ps.host_address(0, True) == "127.0.0.2" and ps.host_address(3, True) == "127.0.0.5"
    assert ps.host_address(3, False) == "127.0.0.1"
    assert [ps.bounds(10, 3, j) for j in range(3)] == [(0, 3), (3, 6), (6, 10)]
