"""The scheduler's worker agents: one per server of the scenario's cluster, on this machine or on many.

With ``real.agents: local`` the scheduler starts one ``clustertwin agent`` process per server itself; with
``remote`` it waits for agents started on the servers (``clustertwin agent --scheduler HOST:PORT --type
NAME --devices ...``). Either way an agent offers its worker type and devices (``hello/``) and is taken
for the first server of its type that has none, if its devices fit that server; otherwise it is told why
not (``welcome/``) and the scheduler goes on waiting. Agents that do not come within
``real.agent_timeout_s`` end the run with a message naming the servers still missing and the command that
starts their agents.

A lost agent (a dead machine) is replaced: a local one is started again; for a remote one the scheduler
waits for another agent of its type (a replacement machine) within the same timeout. On a ``market:``
fleet each server is one instance: its agent is killed when the price trace terminates the instance
(:meth:`Fleet.terminate`) and started again when the trace gives it back.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

from clustertwin.policies.gavel.cluster import ClusterLayout
from clustertwin.runtime.cores import format_slots, slot_cores
from clustertwin.runtime.gavel.control import POLL_S, SECRET_ENV, ControlServer
from clustertwin.runtime.launch import die_with_parent
from clustertwin.scenarios.gavel_schema import Scenario

from clustertwin.errors import RunFailure

READY_S = 60.0  # how long a welcomed agent may take to say it is ready


@dataclass
class Agent:
    """One server of the cluster and the agent serving it (once one has come)."""

    name: str
    worker_type: int
    type_name: str
    server: int
    slots: int
    devices: str  # the --devices of a local agent: N, or cuda:I,J
    cores: str | None = None  # the --cores of a local agent
    process: subprocess.Popen | None = None  # a local agent's process
    address: str = ""  # where other machines reach it (torchrun rendezvous)
    present: bool = False
    refused: list[str] = field(default_factory=list)


class Fleet:
    def __init__(
        self, scenario: Scenario, layout: ClusterLayout, control: ControlServer, secret: bytes
    ) -> None:
        self.scenario, self.layout, self.control, self._secret = scenario, layout, control, secret
        real = scenario.real
        assert real is not None
        self.real = real
        self.local = real.agents == "local"
        cores = slot_cores(scenario) if real.pin_cores else None
        self.agents: list[Agent] = []
        for j, name in enumerate(layout.worker_types):
            worker, k = real.workers[name], layout.gpus_per_server[j]
            for server in range(-(-layout.gpus[j] // k)):
                devices = str(k)
                if worker.device == "cuda":
                    assert worker.cuda_devices is not None
                    devices = "cuda:" + ",".join(map(str, worker.cuda_devices[server * k : (server + 1) * k]))
                pinned = None if cores is None else format_slots(cores[name][server * k : (server + 1) * k])
                self.agents.append(Agent(f"{name}-{server}", j, name, server, k, devices, pinned))
        self._seen: set[str] = set()
        self.refusals: list[str] = []

    def agent_for(self, worker_type: int, server: int) -> Agent:
        return next(a for a in self.agents if a.worker_type == worker_type and a.server == server)

    # --- coming -------------------------------------------------------------------------------------

    def start(self, first_round: int) -> None:
        if self.local:
            for agent in self.agents:
                self._start_local(agent)
        else:
            print(self._waiting_message(self.agents), file=sys.stderr)
        self._admit(self.agents, first_round)

    def _start_local(self, agent: Agent) -> None:
        address = f"127.0.0.1:{self.control.port}" if self.control.host == "0.0.0.0" else self.control.address
        command = [
            sys.executable, "-m", "clustertwin.runtime.gavel.agent", "--scheduler", address,
            "--type", agent.type_name, "--devices", agent.devices, "--wait", str(self.real.agent_timeout_s),
        ]  # fmt: skip
        if agent.cores is not None:
            command += ["--cores", agent.cores]
        env = {**os.environ, SECRET_ENV: self._secret.decode()}
        agent.process = subprocess.Popen(command, env=env, preexec_fn=die_with_parent)

    def _waiting_message(self, missing: list[Agent]) -> str:
        listen = self.control.address
        lines = [
            f"waiting up to {self.real.agent_timeout_s:g} s for {len(missing)} agent(s); on each server run"
        ]
        for agent in missing:
            worker = self.real.workers[agent.type_name]
            devices = f"cuda:<{agent.slots} ids>" if worker.device == "cuda" else str(agent.slots)
            lines.append(
                f"  clustertwin agent --scheduler {listen} --type {agent.type_name} --devices {devices}"
            )
        lines.append(f"with the run's secret in ${SECRET_ENV} or --secret-file")
        return "\n".join(lines)

    def _offer(self, ident: str, offer: dict, wanted: list[Agent]) -> None:
        """Take an agent's offer for a server still missing one, or tell it why not."""
        kind = offer.get("type")
        slots, cuda = int(offer.get("slots", 0)), bool(offer.get("cuda"))
        why = None
        if kind not in self.layout.worker_types:
            why = f"the scenario has no worker type {kind!r} (it has {', '.join(self.layout.worker_types)})"
        else:
            device = self.real.workers[kind].device
            k = self.layout.gpus_per_server[self.layout.worker_types.index(kind)]
            if (device == "cuda") != cuda:
                why = f"{kind} servers run on {device}; this agent offers {'cuda' if cuda else 'cpu'} devices"
            elif slots != k:
                why = f"{kind} servers hold {k} devices each; this agent offers {slots}"
        free = [a for a in wanted if a.type_name == kind and not a.present]
        if why is None and not free:
            why = f"every {kind} server of the cluster has its agent already"
        if why is not None:
            self.refusals.append(f"{kind} agent with {slots} devices: {why}")
            self.control.put(f"welcome/{ident}", {"error": why})
            print(f"turned an agent away: {why}", file=sys.stderr)
            return
        agent = free[0]
        agent.present, agent.address = True, str(offer.get("address", ""))
        worker = self.real.workers[agent.type_name]
        self.control.put(f"welcome/{ident}", {
            "name": agent.name, "device": worker.device, "slowdown": worker.slowdown,
            "threads": self.real.threads_per_cpu_worker,
        })  # fmt: skip

    def _admit(self, wanted: list[Agent], first_round: int) -> None:
        deadline = time.monotonic() + self.real.agent_timeout_s
        while not all(a.present for a in wanted):
            for key in self.control.keys("hello/"):
                if key not in self._seen:
                    self._seen.add(key)
                    self._offer(key.split("/", 1)[1], self.control.get(key), wanted)
            if time.monotonic() >= deadline:
                missing = [a for a in wanted if not a.present]
                detail = "; ".join(f"{a.name} ({a.type_name}, {a.slots} devices)" for a in missing)
                turned = f"; turned away: {'; '.join(self.refusals)}" if self.refusals else ""
                raise RunFailure(
                    f"no agent came within real.agent_timeout_s={self.real.agent_timeout_s:g} s for"
                    f" {detail}{turned}"
                )
            self._check_local(wanted)
            time.sleep(POLL_S)
        found = self.control.wait_for([f"ready/{a.name}" for a in wanted], time.monotonic() + READY_S)
        missing = [a.name for a in wanted if f"ready/{a.name}" not in found]
        if missing:
            raise RunFailure(f"worker agents did not start: {', '.join(missing)}")
        for agent in wanted:
            self.control.put(f"start/{agent.name}", first_round)

    def _check_local(self, wanted: list[Agent]) -> None:
        for agent in wanted:
            if agent.process is not None and not agent.present and agent.process.poll() is not None:
                raise RunFailure(
                    f"worker agent {agent.name} exited with status {agent.process.returncode} before it"
                    " joined (see its message above)"
                )

    def terminate(self, agent: Agent) -> None:
        """The agent's machine is gone (a lost node, or a market instance terminated): a local agent is
        killed, and its job processes die with it (parent-death signal)."""
        if agent.process is not None and agent.process.poll() is None:
            agent.process.kill()
            agent.process.wait()
        agent.present = False
        self.control.delete(f"ready/{agent.name}")
        self.control.delete(f"start/{agent.name}")

    def replace(self, agent: Agent, first_round: int) -> None:
        """A lost agent (a dead node) is replaced for the next round, as a replaced machine would be."""
        self.terminate(agent)
        if self.local:
            self._start_local(agent)
        else:
            print(f"agent {agent.name} was lost; " + self._waiting_message([agent]), file=sys.stderr)
        self._admit([agent], first_round)

    # --- going --------------------------------------------------------------------------------------

    def stop(self, next_round: int) -> None:
        """Tell every agent, waiting for round ``next_round``'s plan, to stop; wait for local ones."""
        for agent in self.agents:
            if agent.present:
                self.control.put(f"plan/{next_round}/{agent.name}", {"stop": True})
        for agent in self.agents:
            if agent.process is None:
                continue
            try:
                agent.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(agent.process.pid, signal.SIGKILL)
                agent.process.wait()
