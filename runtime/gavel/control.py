"""The control plane between the round scheduler, its worker agents and their jobs: JSON values under keys,
served by the scheduler over an authenticated TCP channel.

Once agents run commands on many hosts, this channel is a remote command channel, so nobody is heard
before proving that it holds the run's shared secret:

- a client names who it is (``{"role": "agent"}`` or ``{"role": "job", "key": PREFIX}``) and both sides
  prove knowledge of the role's key by HMAC-SHA256 over the other side's fresh random challenge (mutual,
  so an agent never takes plans from an impostor scheduler either). An agent's key is the secret itself;
  a job's is a token derived from the secret and its key prefix (:func:`job_token`), so the secret never
  reaches user code and a job can speak only for itself;
- what each role may write is fixed by the server: agents register (``hello/``), say they are up
  (``ready/``), post outcomes (``done/``) and rendezvous endpoints (``rdzv/``); a job posts its own
  reports and saves (``PREFIX/report/n``, ``PREFIX/saved``) and reads only under its prefix. Plans, the job
  catalog (which commands exist), leases and verdicts are written by the scheduler alone.

The channel authenticates; it does not encrypt (run it on a private network or through an ssh tunnel).

Keys (``r`` the round, ``a`` an agent):

- ``hello/ID``: an agent offers itself (type, devices, address); ``welcome/ID``: its name, or why not;
- ``catalog``: every job's command, working directory and environment (the scenario's jobs only);
- ``ready/a``: the agent is up; ``start/a``: the first round it takes part in;
- ``plan/r/a``: the jobs agent a runs in round r (possibly none), or ``{"stop": true}``;
- ``done/r/a``: what became of them (exit status, elapsed time, the job's own report);
- ``gone/a``: written by the server when agent a's connection closes, so that a killed agent is lost at
  once rather than at its round's deadline (an agent holds one connection from ``ready/a`` on).

Polling ``has`` rather than a blocking wait keeps a missing agent a quiet, timed event.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import sys
import threading
import time
from collections.abc import Mapping
from multiprocessing.connection import Client, Connection, Listener
from pathlib import Path
from typing import Any

POLL_S = 0.05
HANDSHAKE_S = 10.0  # a client that has not proved itself by then is dropped
SECRET_ENV = "CLUSTERTWIN_SECRET"
_AGENT_WRITES = ("hello/", "ready/", "done/", "rdzv/")


class Refused(ConnectionError):
    """The other side did not prove that it holds the secret, or the server refused a request."""


def read_secret(environ: Mapping[str, str], secret_file: str | Path | None = None) -> bytes | None:
    """The shared secret: the file's content (stripped) when a file is given, else ``CLUSTERTWIN_SECRET``;
    never a command-line value, which every user of the machine can read in the process table."""
    if secret_file is not None:
        text = Path(secret_file).read_text(encoding="utf-8").strip()
        if not text:
            raise ValueError(f"{secret_file}: the secret file is empty")
        return text.encode()
    value = environ.get(SECRET_ENV, "").strip()
    return value.encode() if value else None


def new_secret() -> bytes:
    return secrets.token_hex(32).encode()


def job_token(secret: bytes, key: str) -> bytes:
    """The key a job with prefix ``key`` proves itself with: it opens that prefix and nothing else."""
    return hmac.new(secret, b"job:" + key.encode(), hashlib.sha256).hexdigest().encode()


def _proof(key: bytes, challenge: bytes, identity: bytes) -> bytes:
    return hmac.new(key, challenge + identity, hashlib.sha256).digest()


def _receive(conn: Connection, deadline_s: float) -> bytes:
    if not conn.poll(deadline_s):
        raise Refused("no answer in time")
    return conn.recv_bytes(4096)


class ControlServer:
    """The scheduler's side: the store itself, served to authenticated clients on ``host:port``."""

    def __init__(self, host: str, port: int, secret: bytes) -> None:
        self._secret = secret
        self._values: dict[str, str] = {}
        self._lock = threading.Lock()
        self._listener = Listener((host, port), family="AF_INET", backlog=64)
        self.host, self.port = self._listener.address[0], int(self._listener.address[1])
        self.refused: list[str] = []  # who was turned away, and why (never the secret)
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    # --- the scheduler's own access (no network) ----------------------------------------------------

    def put(self, key: str, value: Any) -> None:
        with self._lock:
            self._values[key] = json.dumps(value)

    def has(self, key: str) -> bool:
        with self._lock:
            return key in self._values

    def get(self, key: str) -> Any:
        with self._lock:
            return json.loads(self._values[key])

    def delete(self, key: str) -> None:
        with self._lock:
            self._values.pop(key, None)

    def keys(self, prefix: str) -> list[str]:
        with self._lock:
            return sorted(k for k in self._values if k.startswith(prefix))

    def wait_for(self, keys: list[str], deadline: float) -> dict[str, Any]:
        return _wait_for(self, keys, deadline)

    def close(self) -> None:
        self._closed = True
        self._listener.close()

    # --- clients ------------------------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _refuse(self, conn: Connection, why: str) -> None:
        self.refused.append(why)
        print(f"control plane: refused a client: {why}", file=sys.stderr)
        try:
            conn.send_bytes(b"refused")
        except OSError:
            pass
        conn.close()

    def _serve(self, conn: Connection) -> None:
        try:
            raw = _receive(conn, HANDSHAKE_S)
            try:
                identity = json.loads(raw)
                role = identity["role"]
                key = self._secret if role == "agent" else job_token(self._secret, str(identity["key"]))
            except (ValueError, KeyError, TypeError):
                self._refuse(conn, "malformed greeting")
                return
            mine = secrets.token_bytes(32)
            conn.send_bytes(mine)
            answer = _receive(conn, HANDSHAKE_S)
            theirs, proof = answer[:32], answer[32:]
            if len(theirs) != 32 or not hmac.compare_digest(proof, _proof(key, mine, raw)):
                self._refuse(conn, f"a {role} without the run's secret")
                return
            conn.send_bytes(b"ok" + _proof(key, theirs, raw))
        except (Refused, OSError, EOFError):
            conn.close()
            return
        prefix = None if role == "agent" else str(identity["key"]) + "/"
        agent = None  # the agent this connection speaks for, once it said it is ready
        with conn:
            while True:
                try:
                    request = json.loads(conn.recv_bytes())
                except (OSError, EOFError, ValueError):
                    break
                key = str(request.get("key", ""))
                if prefix is None and request.get("op") == "set" and key.startswith("ready/"):
                    agent = key.removeprefix("ready/")
                    self.delete(f"gone/{agent}")
                try:
                    conn.send_bytes(json.dumps(self._answer(request, prefix)).encode())
                except OSError:
                    break
        if agent is not None and not self._closed:
            self.put(f"gone/{agent}", True)

    def _answer(self, request: dict[str, Any], prefix: str | None) -> dict[str, Any]:
        op, key = request.get("op"), str(request.get("key", ""))
        if prefix is not None and not key.startswith(prefix):
            return {"error": f"a job may use only its own keys ({prefix}...)"}
        if op == "set":
            allowed = (
                key.startswith(_AGENT_WRITES)
                if prefix is None
                else key.startswith(prefix + "report/") or key == prefix + "saved"
            )
            if not allowed:
                return {"error": f"this client may not write {key}"}
            with self._lock:
                self._values[key] = str(request["value"])
            return {}
        with self._lock:
            if op == "check":
                return {"value": key in self._values}
            if op == "get":
                return {"value": self._values.get(key)}
        return {"error": f"unknown request {op!r}"}


class ControlClient:
    """An agent's or a job's side: the same ``put``/``has``/``get``/``wait_for`` over the network."""

    def __init__(self, address: str, key: bytes, *, job: str | None = None, connect_s: float = 30.0) -> None:
        host, port = address.rsplit(":", 1)
        self.address = address
        identity = json.dumps({"role": "agent"} if job is None else {"role": "job", "key": job}).encode()
        deadline = time.monotonic() + connect_s
        while True:
            try:
                self._conn = Client((host, int(port)), family="AF_INET")
                break
            except OSError:
                if time.monotonic() >= deadline:
                    raise ConnectionError(f"no scheduler answers at {address}") from None
                time.sleep(0.5)
        self._lock = threading.Lock()
        try:
            self._conn.send_bytes(identity)
            challenge = _receive(self._conn, HANDSHAKE_S)
            mine = secrets.token_bytes(32)
            self._conn.send_bytes(mine + _proof(key, challenge, identity))
            answer = _receive(self._conn, HANDSHAKE_S)
        except (OSError, EOFError) as err:
            raise Refused(f"the scheduler at {address} closed the connection: wrong secret?") from err
        if not answer.startswith(b"ok"):
            raise Refused(f"the scheduler at {address} refused this client: wrong or missing secret")
        if not hmac.compare_digest(answer[2:], _proof(key, mine, identity)):
            raise Refused(f"{address} did not prove that it holds the run's secret: not our scheduler")

    def _ask(self, request: dict[str, Any]) -> Any:
        with self._lock:
            try:
                self._conn.send_bytes(json.dumps(request).encode())
                answer = json.loads(self._conn.recv_bytes())
            except (OSError, EOFError) as err:
                raise ConnectionError(f"lost the scheduler at {self.address}") from err
        if "error" in answer:
            raise Refused(answer["error"])
        return answer.get("value")

    def put(self, key: str, value: Any) -> None:
        self._ask({"op": "set", "key": key, "value": json.dumps(value)})

    def has(self, key: str) -> bool:
        return bool(self._ask({"op": "check", "key": key}))

    def get(self, key: str) -> Any:
        value = self._ask({"op": "get", "key": key})
        if value is None:
            raise KeyError(key)
        return json.loads(value)

    def wait_for(self, keys: list[str], deadline: float) -> dict[str, Any]:
        return _wait_for(self, keys, deadline)

    def close(self) -> None:
        self._conn.close()


def _wait_for(store: ControlServer | ControlClient, keys: list[str], deadline: float) -> dict[str, Any]:
    """The values of ``keys`` that appear before ``deadline`` (a ``time.monotonic`` instant)."""
    found: dict[str, Any] = {}
    while True:
        for key in keys:
            if key not in found and store.has(key):
                found[key] = store.get(key)
        if len(found) == len(keys) or time.monotonic() >= deadline:
            return found
        time.sleep(POLL_S)


def job_client(environ: Mapping[str, str] | None = None) -> tuple[ControlClient, str] | None:
    """The control channel of a job started by an agent (its environment names it), and the job's key
    prefix; None for a job run by hand."""
    env = os.environ if environ is None else environ
    address, key, token = (env.get(f"CLUSTERTWIN_{n}") for n in ("CONTROL", "JOB_KEY", "JOB_TOKEN"))
    if not (address and key and token):
        return None
    return ControlClient(address, token.encode(), job=key), key
