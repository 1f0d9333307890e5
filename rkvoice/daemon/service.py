"""The resident daemon: load every engine once, then supervise the turn loop for weeks.

The main thread owns signals and the systemd watchdog; a worker thread runs the turn loop.
WATCHDOG=1 is pinged only while the worker lives and no work it marked busy (a turn, a
transcription) is older than ``daemon.stall_s``: a wedged pipeline gets systemd's restart.

- SIGTERM/SIGINT: STOPPING=1, cancel speech, let the worker finish, close the engines, exit 0.
- SIGHUP: re-read the config; engines whose config changed are reloaded between turns.
- A failed turn is logged, apologised for and counted; ``daemon.max_failures`` in a row exit 3.
- A missing microphone is not a failed turn: the daemon stays READY and retries with backoff.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

from rkvoice.clock import Clock, MonotonicClock
from rkvoice.config import Config
from rkvoice.errors import Code, RkvoiceError, is_device_error
from rkvoice.gate import PriorityGate
from rkvoice.hear.sources import AudioSource
from rkvoice.stages import Plan, Stages, StageSet, product_plan
from rkvoice.turn import Turn

from .listener import Busy, Listener, ListenerFactory, LocalListener, Report
from .lock import instance_lock
from .sdnotify import Notifier

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_REPEATED_FAILURES = 3
EXIT_FATAL = 4


class Daemon:
    def __init__(self, cfg: Config, plan: Plan, load_config: Callable[[], Config], notifier: Notifier | None = None,
                 clock: Clock | None = None) -> None:
        self.cfg = cfg
        self.plan = plan
        self._load_config = load_config
        self.notifier = notifier or Notifier()
        self.clock = clock or MonotonicClock()
        self.stages = StageSet(plan.stages, on_progress=self._loading)
        self.listener: Listener | None = None
        self.stop = threading.Event()
        self._wake = threading.Event()  # wakes the main thread early
        self._reload = threading.Event()
        self._new_cfg: Config | None = None  # read by the main thread, applied by the worker between runs
        self._wyoming: tuple[threading.Thread, threading.Event] | None = None
        self._exit_code = EXIT_OK
        self._busy: dict[object, tuple[str, float]] = {}
        self._busy_lock = threading.Lock()
        self._count_lock = threading.Lock()  # turns may end on the loop's own threads
        self._failures = 0
        self._signalled = ""
        self.turns = 0

    def run(self, handle_signals: bool = True) -> int:
        """Load, announce READY, supervise until stopped; returns the exit status.
        ``handle_signals=False`` lets tests run the daemon on a non-main thread."""
        handlers = {signal.SIGTERM: self._on_stop, signal.SIGINT: self._on_stop,
                    signal.SIGHUP: lambda _signum, _frame: self.request_reload()}
        previous = {sig: signal.signal(sig, h) for sig, h in handlers.items()} if handle_signals else {}
        try:
            with instance_lock(self.cfg.daemon.lock_path(self.cfg.state.path)):
                self.notifier.notify(STATUS="loading models")
                self.stages.load_all(self.cfg)
                self._host()
                if self.stop.is_set():  # SIGTERM during start-up
                    return self._shutdown(None)
                self.notifier.notify(READY=1, STATUS="listening")
                log.info("ready: %s loaded", ", ".join(self.stages.loaded))
                worker = threading.Thread(target=self._work, name="turn-loop", daemon=True)
                worker.start()
                self._supervise(worker)
                return self._shutdown(worker)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.notifier.close()

    def _host(self) -> None:
        """The turn loop over the loaded engines, and with ``wyoming.uri`` a Wyoming server for them on
        a thread of its own (both again after a reload, on the new engines). A server that fails is
        logged; the local loop goes on."""
        if self.listener is not None:  # a reload: the old listener lets go first (the satellite: its port)
            self.listener.close()
            self.listener = None
        make: ListenerFactory = LocalListener
        if self.cfg.satellite.uri:  # the microphone's requests go to Home Assistant's pipeline
            make = satellite_listener
        self.listener = make(self.stages.stages, self.cfg, self.report, self.busy, self.plan.source, self.clock)
        if not self.cfg.wyoming.uri:
            return
        from rkvoice.wyoming.engines import Engines
        from rkvoice.wyoming.server import serve_wyoming

        engines = Engines.of(self.cfg, self.stages.stages, self.listener.answer_gate)  # the loop's own gates
        stop = threading.Event()

        def serve() -> None:
            try:
                serve_wyoming(self.cfg, engines=engines, stop=stop)
            except Exception as exc:
                log.error("the Wyoming server stopped (the local assistant goes on): %s", exc)
            finally:
                engines.close()

        thread = threading.Thread(target=serve, name="wyoming", daemon=True)
        thread.start()
        self._wyoming = (thread, stop)

    def _stop_wyoming(self) -> None:
        if self._wyoming is not None:
            thread, stop = self._wyoming
            self._wyoming = None
            stop.set()
            thread.join(2.0)

    def _interrupt(self, reason: str) -> None:
        """Make the hosted loop return (cancelling the turn in progress)."""
        if self.listener is not None:
            try:
                self.listener.interrupt(reason)
            except Exception as exc:
                log.error("stopping the turn loop failed: %s", exc)

    def _loading(self, what: str) -> None:
        # slow loads on the board (Paraformer ~8.5 s): ask systemd for more start-up time
        self.notifier.notify(STATUS=what, EXTEND_TIMEOUT_USEC=int(self.cfg.daemon.load_timeout_s * 1_000_000))

    # Signal handlers only set events: the main thread may be inside the notifier or a
    # stage when the signal arrives, so doing the work here could deadlock on their locks.
    def _on_stop(self, signum: int, _frame: FrameType | None) -> None:
        self._signalled = signal.Signals(signum).name
        self.stop.set()
        self._wake.set()

    def request_reload(self) -> None:
        """Re-read the config before the next turn (SIGHUP; safe from any thread)."""
        self._reload.set()
        self._wake.set()

    def request_stop(self, code: int = EXIT_OK) -> None:
        """Stop from any thread (not from a signal handler): the main thread finishes the job."""
        if code != EXIT_OK and self._exit_code == EXIT_OK:
            self._exit_code = code
        self.stop.set()
        self._wake.set()

    def _supervise(self, worker: threading.Thread) -> None:
        interval = self.notifier.watchdog_interval or 5.0
        stall = self.cfg.daemon.stall_s
        while not self.stop.is_set():
            self._wake.wait(interval)
            self._wake.clear()
            if self.stop.is_set():
                break
            if self._reload.is_set():
                self._reload.clear()
                self._read_new_config()
            if not worker.is_alive():
                log.error("the turn loop thread died")
                self.request_stop(EXIT_FATAL)
                break
            stuck = self.stalled(stall)
            if stuck is None:
                self.notifier.notify(WATCHDOG=1)
            else:
                log.error("stuck in %s for %.0f s; not feeding the watchdog", *stuck)

    @contextmanager
    def busy(self, what: str) -> Iterator[None]:
        token = object()
        with self._busy_lock:
            self._busy[token] = (what, self.clock.now())
        try:
            yield
        finally:
            with self._busy_lock:
                del self._busy[token]

    def stalled(self, stall: float) -> tuple[str, float] | None:
        """(what, seconds) of busy work older than ``stall`` seconds, else None."""
        now = self.clock.now()
        with self._busy_lock:
            for what, since in self._busy.values():
                if now - since >= stall:
                    return what, now - since
        return None

    def _shutdown(self, worker: threading.Thread | None) -> int:
        t0 = self.clock.now()
        if self._signalled:
            log.info("%s: stopping", self._signalled)
        self.notifier.notify(STOPPING=1, STATUS="stopping")
        self._interrupt("shutdown")  # cancel speech so the turn ends quickly
        self._stop_wyoming()
        if worker is not None:
            worker.join(self.cfg.daemon.stop_timeout_s)
        if worker is not None and worker.is_alive():
            log.error("the turn did not stop within %.1f s; exiting without closing engines",
                      self.cfg.daemon.stop_timeout_s)
        else:
            if self.listener is not None:
                self.listener.close()
            self.stages.close_all()
        log.info("stopped after %d turns (shutdown %.2f s), exit %d",
                 self.turns, self.clock.now() - t0, self._exit_code)
        return self._exit_code

    def _work(self) -> None:
        backoff = 0.0
        while not self.stop.is_set():
            new_cfg, self._new_cfg = self._new_cfg, None
            if new_cfg is not None:
                self._do_reload(new_cfg)
                continue
            assert self.listener is not None
            try:
                self.listener.run()
            except Exception as exc:
                if is_device_error(exc) and not self.stop.is_set():
                    backoff = min(max(backoff * 2, self.cfg.daemon.device_retry_s),
                                  self.cfg.daemon.device_retry_max_s)
                    log.warning("%s; retrying in %.1f s", exc, backoff)
                    self.notifier.notify(STATUS=f"waiting for the microphone: {exc}")
                    self.stop.wait(backoff)
                    continue
                self.report(exc)  # once stopping: logged as ended by shutdown, and the loop ends
                continue
            if backoff:
                log.info("microphone is back")
                self.notifier.notify(STATUS="listening")
                backoff = 0.0

    def report(self, result: Turn | BaseException) -> None:
        exc = result.exception if isinstance(result, Turn) else result
        if exc is not None and self.stop.is_set():
            log.info("turn ended by shutdown: %s", exc)
            return
        with self._count_lock:
            self.turns += 1
            self._failures = 0 if exc is None else self._failures + 1
            n, failures = self.turns, self._failures
        if exc is None:
            assert isinstance(result, Turn)
            summary = result.timeline.summary()
            lat = " ".join(f"{k}={summary[k]:g}" for k in ("asr_ms", "end_to_first_audio_ms")
                           if isinstance(summary.get(k), (int, float)))
            log.info("turn %d: heard %r route=%s answer_chars=%d%s %s", n, result.text, result.route or "-",
                     len(result.result or ""), f" cancelled ({result.reason})" if result.cancelled else "", lat)
            return
        if isinstance(exc, RkvoiceError):
            log.error("turn %d failed in %s (%s): %s", n, exc.stage, exc.code, exc.message)
        else:
            log.error("turn %d failed: %s", n, exc, exc_info=exc)
        assert self.listener is not None
        fatal = failures >= self.cfg.daemon.max_failures
        # before exiting, the apology is heard (the shutdown would cancel it), within stop_timeout_s
        self.listener.apologise(self.cfg.daemon.apology, wait_s=self.cfg.daemon.stop_timeout_s if fatal else 0.0)
        if fatal:
            log.critical("%d turns failed in a row; exiting so the service manager restarts us", failures)
            self.request_stop(EXIT_REPEATED_FAILURES)

    def _read_new_config(self) -> None:
        """On the main thread: a config that does not load is refused here, and the running turn
        loop goes on undisturbed; a good one is handed to the worker, and the loop returns."""
        log.info("SIGHUP: reloading the config")
        try:
            self._new_cfg = self._load_config()
        except RkvoiceError as exc:
            log.error("config not reloaded, keeping the running one: %s", exc)
            return
        self._interrupt("reload")

    def _do_reload(self, new_cfg: Config) -> None:
        self._stop_wyoming()  # it uses the engines about to be swapped; started again on the new ones
        self.notifier.notify(RELOADING=1, MONOTONIC_USEC=time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000)
        try:
            changed = self.stages.reload(self.cfg, new_cfg)
        except Exception as exc:
            log.error("reload failed: %s", exc)
        else:
            self.cfg = new_cfg
            log.info("config reloaded; reloaded engines: %s", ", ".join(changed) or "none")
        if not self.stages.complete:
            log.critical("an engine could not be restored after a failed reload; exiting")
            self.request_stop(EXIT_FATAL)
            return
        self._host()  # always rebuilt: a partly failed reload may still have swapped some engines
        self.notifier.notify(READY=1, STATUS="listening")


def satellite_listener(stages: Stages, cfg: Config, report: Report, busy: Busy,
                       source: Callable[[Config], AudioSource], clock: Clock | None) -> Listener:
    """The satellite as the daemon's listener; while Home Assistant is away, the local turn loop answers."""
    from rkvoice.esphome import link_for
    from rkvoice.satellite.run import SatelliteListener

    def local(gate: PriorityGate) -> LocalListener:
        return LocalListener(stages, cfg, report, busy, source, clock, answer_gate=gate)

    return SatelliteListener(stages, cfg, report, busy, source, clock, local=local, link=link_for(cfg))


def setup_logging(verbose: bool = False) -> None:
    """INFO (one line per turn) or DEBUG (per chunk) to stderr; under systemd (JOURNAL_STREAM
    set) journald adds the time itself. Replaces whatever the CLI configured."""
    fmt = "%(levelname)s %(name)s: %(message)s"
    if not os.environ.get("JOURNAL_STREAM"):
        fmt = "%(asctime)s " + fmt
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format=fmt, stream=sys.stderr,
                        force=True)


def serve(load: Callable[[], Config], plan: Callable[[Config], Plan] = product_plan) -> int:
    """The daemon's entry point (``assistant.py`` without a mode flag): load the config and run the
    daemon on ``plan``'s stages until it is told to stop (SIGTERM); returns the exit status. ``load``
    is called again on SIGHUP. Other plans run the real daemon on other stages, as the tests' daemon
    process does (tests/daemon_process.py)."""
    try:
        cfg = load()
        stages = plan(cfg)
    except RkvoiceError as exc:
        log.error("%s", exc)
        return 2
    try:
        return Daemon(cfg, stages, load).run()
    except RkvoiceError as exc:
        log.error("%s", exc)
        return 1 if exc.code == Code.ALREADY_RUNNING else EXIT_FATAL
