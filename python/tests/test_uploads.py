"""test_uploads.py - the Datadog and Pyroscope upload sinks through the binding.

Each case starts the repository's receiver, tests/test_upload_receiver.py (the one the C
suite tests/test_upload.c uses): it listens on 127.0.0.1, prints "PORT n", then "GOT i"
per request, checks every request itself (headers, multipart, query, event.json, tags,
and the profile decoded from the bytes on the wire) against the expectations given as
JSON, and exits 0 only when exactly the expected number of valid requests came. The
tests check that exit status, and the sink's statistics (UploadSink.stats()).

DD_* and PYROSCOPE_* variables are cleared for every test and restored after it.
"""

import json
import os
import pickle
import queue
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
import unittest
import warnings

import pprofkit
import support

HERE = os.path.dirname(os.path.abspath(__file__))
RECEIVER = os.path.join(os.path.dirname(os.path.dirname(HERE)), "tests",
                        "test_upload_receiver.py")
GUARD = 30  # seconds: hang guards only

TYPES = [("wall-time", "nanoseconds"), ("samples", "count")]
TYPES_JSON = [list(t) for t in TYPES]
# As the Pyroscope sink sends them: Grafana Pyroscope refuses a '-' in a sample type.
PY_TYPES_JSON = [[t.replace("-", "_"), u] for t, u in TYPES]
TOTALS = [60, 3]  # what record() flushes: wall-time 10 + 20 + 30, one count each
EINVAL = pprofkit._native.PPK_EINVAL

ENV_VARS = ["DD_TRACE_AGENT_URL", "DD_AGENT_HOST", "DD_TRACE_AGENT_PORT", "DD_SERVICE",
            "DD_ENV", "DD_VERSION", "DD_TAGS", "DD_API_KEY", "DD_SITE",
            "DD_PROFILING_AGENTLESS", "PYROSCOPE_SERVER_ADDRESS",
            "PYROSCOPE_APPLICATION_NAME", "PYROSCOPE_BASIC_AUTH_USER",
            "PYROSCOPE_BASIC_AUTH_PASSWORD", "PYROSCOPE_AUTH_TOKEN", "PYROSCOPE_TENANT_ID",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT", "OTEL_EXPORTER_OTLP_HEADERS",
            "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"]


def record(r):
    """Three samples: wall-time 10, 20, 30, one count each (TOTALS)."""
    with pprofkit.Sample(r) as s:
        for i in range(1, 4):
            s.record([("leaf", "a.py", i), ("main", "a.py", 1)], [10 * i, 1])


def conserved(test, st):
    test.assertEqual(st["queued"], st["sent"] + st["dropped_queue_full"] +
                     st["dropped_failed"] + st["dropped_shutdown"] + st["dropped_invalid"] +
                     st["dropped_nomem"], st)


class Receiver:
    """tests/test_upload_receiver.py in MODE with EXPECT; killed at cleanup if alive."""

    def __init__(self, test, mode, expect):
        env = dict(os.environ)
        # The receiver is a plain Python program: no ASan runtime in it.
        env.pop("LD_PRELOAD", None)
        env.pop("PYTHONMALLOC", None)
        # Its otlp mode decodes with python3-protobuf, which only Debian's python3 has.
        python = sys.executable
        if mode == "otlp" and os.access("/usr/bin/python3", os.X_OK):
            python = "/usr/bin/python3"
        self.proc = subprocess.Popen([python, RECEIVER, mode, json.dumps(expect)],
                                     stdout=subprocess.PIPE, env=env)
        test.addCleanup(self.kill)
        self.lines = queue.Queue()
        self.got = 0
        threading.Thread(target=self.read, daemon=True).start()
        try:
            first = self.lines.get(timeout=GUARD)
        except queue.Empty:
            test.fail("the receiver did not start")
        test.assertTrue(first.startswith("PORT "), first)
        self.port = int(first.split()[1])
        self.url = "http://127.0.0.1:%d" % self.port

    def read(self):
        for line in self.proc.stdout:
            self.lines.put(line.decode().strip())
        self.lines.put(None)

    def finish(self, stop=False):
        """Waits for the receiver to exit (SIGTERM first when stop); returns its exit
        status. Counts the GOT lines in self.got."""
        if stop:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(GUARD)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError("the receiver did not exit")
        while True:
            line = self.lines.get(timeout=GUARD)
            if line is None:
                break
            if line.startswith("GOT "):
                self.got = int(line.split()[1])
        return rc

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()


def dd_expect(**kw):
    e = {"path": "/profiling/v1/input", "origin": "pprofkit",
         "origin_version": pprofkit.VERSION, "family": "python", "endpoint_counts": None,
         "sample_types": TYPES_JSON, "totals": TOTALS, "count": 1, "limit": GUARD}
    e.update(kw)
    return e


def closed_port():
    """A port on 127.0.0.1 that nothing listens on (connections are refused)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class UploadBase(unittest.TestCase):
    def setUp(self):
        saved = {k: os.environ.get(k) for k in ENV_VARS}

        def restore():
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

        self.addCleanup(restore)
        for k in ENV_VARS:
            os.environ.pop(k, None)

    def recorder(self, **kw):
        r = pprofkit.Recorder(TYPES, **kw)
        self.addCleanup(r.close)
        return r

    def upload_twice(self, r, sink, endpoints=()):
        """Records and exports to the sinks; checks the sink's statistics after the
        upload; records again and closes the recorder, whose last window is uploaded
        and drained by close(). The receiver expects these two requests."""
        record(r)
        for ep, n in endpoints:
            r.add_endpoint_count(ep, n)
        r.export_to_sinks()
        self.assertTrue(sink.flush(timeout_ms=GUARD * 1000))
        st = sink.stats()
        self.assertEqual(st["queued"], 1)
        self.assertEqual(st["sent"], 1)
        self.assertEqual(st["attempts"], 1)
        self.assertEqual(st["last_http_status"], 200)
        self.assertGreater(st["bytes_sent"], 100)
        self.assertEqual(st["queue_len"], 0)
        conserved(self, st)
        self.assertEqual(r.stats()["sink_failures"], 0)
        record(r)
        for ep, n in endpoints:
            r.add_endpoint_count(ep, n)
        r.close()
        with self.assertRaises(pprofkit.ClosedError):
            sink.stats()


class TestDatadog(UploadBase):
    def test_agent_upload(self):
        rx = Receiver(self, "datadog", dd_expect(
            count=2, endpoint_counts={"GET /users": 3, "POST /x": 1},
            tags={"service": "svc", "env": "prod", "version": "1.2", "language": "python",
                  "profiler_version": pprofkit.VERSION, "team": "core", "k2": "v2"}))
        r = self.recorder()
        sink = r.add_datadog_sink(agent_url=rx.url, service="svc", env="prod", version="1.2",
                                  tags="team:core,k2:v2", timeout_ms=GUARD * 1000)
        self.assertIsInstance(sink, pprofkit.UploadSink)
        self.assertEqual(sink.kind, "datadog")
        self.upload_twice(r, sink, endpoints=[("GET /users", 2), ("GET /users", 1),
                                              ("POST /x", 1)])
        self.assertEqual(rx.finish(), 0)
        self.assertEqual(rx.got, 2)

    def test_config_from_environment(self):
        rx = Receiver(self, "datadog", dd_expect(
            tags={"service": "kw-svc", "env": "staging", "version": "3.1", "team": "env",
                  "zone": "a"}))
        os.environ.update({"DD_TRACE_AGENT_URL": rx.url, "DD_SERVICE": "env-svc",
                           "DD_ENV": "staging", "DD_VERSION": "3.1",
                           "DD_TAGS": "team:env zone:a"})
        r = self.recorder()
        # The variables first, then the keywords: service is the keyword's.
        r.add_datadog_sink(service="kw-svc")
        record(r)
        r.close()
        self.assertEqual(rx.finish(), 0)
        self.assertEqual(rx.got, 1)

    def test_from_env_false_ignores_the_environment(self):
        rx = Receiver(self, "datadog", dd_expect(
            tags={"service": "kw-only"}, absent_tags=["env", "version", "team"]))
        os.environ.update({"DD_TRACE_AGENT_URL": "http://127.0.0.1:%d" % closed_port(),
                           "DD_SERVICE": "env-svc", "DD_ENV": "staging",
                           "DD_VERSION": "3.1", "DD_TAGS": "team:env",
                           "DD_TRACE_AGENT_PORT": "80a"})  # malformed: not even read
        r = self.recorder()
        r.add_datadog_sink(from_env=False, agent_url=rx.url, service="kw-only")
        record(r)
        r.close()
        self.assertEqual(rx.finish(), 0)
        self.assertEqual(rx.got, 1)

    def test_malformed_variables(self):
        r = self.recorder()
        cases = [("DD_TRACE_AGENT_PORT", "80a"), ("DD_TRACE_AGENT_PORT", "70000"),
                 ("DD_TRACE_AGENT_URL", "ftp://agent:8126"), ("DD_TAGS", "a:1,:novalue"),
                 ("DD_PROFILING_AGENTLESS", "maybe"), ("DD_ENV", "a,b")]
        for var, value in cases:
            with self.subTest(var=var, value=value):
                os.environ[var] = value
                try:
                    with self.assertRaises(pprofkit.InvalidArgumentError) as cm:
                        r.add_datadog_sink()
                finally:
                    del os.environ[var]
                self.assertIsInstance(cm.exception, ValueError)
                self.assertEqual(cm.exception.code, EINVAL)
                self.assertIn(var, str(cm.exception))
        # Nothing was added: the recorder exports (to no sink) and closes as usual.
        record(r)
        r.export_to_sinks()
        self.assertEqual(r.stats()["sink_failures"], 0)

    def test_malformed_config(self):
        r = self.recorder()
        cases = [(dict(agentless=True), "api_key"), (dict(queue_len=0), "queue_len"),
                 (dict(agent_url="ftp://x"), "agent_url"),
                 (dict(tags="a:1,:novalue"), "tags")]
        for kw, field in cases:
            with self.subTest(field=field):
                with self.assertRaises(pprofkit.InvalidArgumentError) as cm:
                    r.add_datadog_sink(from_env=False, **kw)
                self.assertEqual(cm.exception.code, EINVAL)
                self.assertIn(field, str(cm.exception))
        with self.assertRaises(TypeError) as cm:
            r.add_datadog_sink(service=3)
        self.assertIn("service", str(cm.exception))
        with self.assertRaises(TypeError):
            r.add_datadog_sink(no_such_field="x")
        with self.assertRaises(TypeError):
            r.add_datadog_sink("http://127.0.0.1:1")


class TestPyroscope(UploadBase):
    def test_upload(self):
        rx = Receiver(self, "pyroscope", {
            "name": "my.app{env=test,region=eu-1}", "sample_rate": "97",
            "spy_name": "pprofkit-python", "basic_auth": "user:p@ss:w", "tenant": "tenant-1",
            "sample_types": PY_TYPES_JSON, "totals": TOTALS, "count": 2, "limit": GUARD})
        r = self.recorder()
        sink = r.add_pyroscope_sink(server_address=rx.url + "/", application_name="my.app",
                                    tags="env=test,region=eu-1", sample_rate=97,
                                    basic_auth_user="user", basic_auth_password="p@ss:w",
                                    tenant_id="tenant-1")
        self.assertEqual(sink.kind, "pyroscope")
        self.upload_twice(r, sink)
        self.assertEqual(rx.finish(), 0)
        self.assertEqual(rx.got, 2)

    def test_profiler_upload_is_accepted(self):
        # The sampler's profile as Grafana Pyroscope reads it: the receiver refuses what
        # the server refuses, here Datadog's names: the sample types "wall-time" and
        # "cpu-time", and "thread name", a string label (a series label there) whose key
        # is not a label name. The sink sends them as wall_time, cpu_time, thread_name.
        # The service's space, which the server refuses in an application name, is '_'.
        rx = Receiver(self, "pyroscope", {
            "name": "py_app{team=core}", "sample_rate": "100", "spy_name": "pprofkit-python",
            "sample_types": [["wall_time", "nanoseconds"], ["cpu_time", "nanoseconds"],
                             ["samples", "count"]],
            "period_type": ["wall_time", "nanoseconds"], "count": 1, "limit": GUARD})
        p = pprofkit.Profiler(out_dir=None, export_period=60, pyroscope=rx.url,
                              service="py app", tags={"team": "core"}, cpu_budget=0)
        p.start()
        end = time.monotonic() + 0.3
        while time.monotonic() < end:
            sum(range(1000))
        uploads = p.stop()["uploads"]
        self.assertEqual(rx.finish(), 0)
        self.assertEqual(rx.got, 1)
        self.assertEqual([(u["kind"], u["sent"], u["dropped_invalid"]) for u in uploads],
                         [("pyroscope", 1, 0)])

    def test_config_from_environment(self):
        rx = Receiver(self, "pyroscope", {
            "name": "env.app{}", "sample_rate": "100", "spy_name": "pprofkit-python",
            "sample_types": PY_TYPES_JSON, "totals": TOTALS, "count": 1, "limit": GUARD})
        os.environ.update({"PYROSCOPE_SERVER_ADDRESS": rx.url,
                           "PYROSCOPE_APPLICATION_NAME": "env.app"})
        r = self.recorder()
        r.add_pyroscope_sink()
        record(r)
        r.close()
        self.assertEqual(rx.finish(), 0)
        # from_env=False: the application name is required again.
        os.environ["PYROSCOPE_APPLICATION_NAME"] = "env.app"
        r2 = self.recorder()
        with self.assertRaises(pprofkit.InvalidArgumentError) as cm:
            r2.add_pyroscope_sink(from_env=False)
        self.assertIn("application_name", str(cm.exception))

    def test_profiler_credentials_from_environment(self):
        # What `python -m pprofkit run --pyroscope URL` sends to Grafana Cloud: basic auth
        # and the tenant from Pyroscope's variables; then a bearer token by keyword.
        rx = Receiver(self, "pyroscope", {
            "name": "cloud.app{}", "sample_rate": "100", "spy_name": "pprofkit-python",
            "basic_auth": "123456:glc_token", "tenant": "team-a",
            "sample_types": [["wall_time", "nanoseconds"], ["cpu_time", "nanoseconds"],
                             ["samples", "count"]],
            "period_type": ["wall_time", "nanoseconds"], "count": 1, "limit": GUARD})
        os.environ.update({"PYROSCOPE_BASIC_AUTH_USER": "123456",
                           "PYROSCOPE_BASIC_AUTH_PASSWORD": "glc_token",
                           "PYROSCOPE_TENANT_ID": "team-a"})
        p = pprofkit.Profiler(out_dir=None, export_period=60, pyroscope=rx.url,
                              service="cloud.app", cpu_budget=0)
        p.start()
        end = time.monotonic() + 0.2
        while time.monotonic() < end:
            sum(range(1000))
        p.stop()
        self.assertEqual(rx.finish(), 0)
        self.assertEqual(rx.got, 1)
        for k in ("PYROSCOPE_BASIC_AUTH_USER", "PYROSCOPE_BASIC_AUTH_PASSWORD",
                  "PYROSCOPE_TENANT_ID"):
            del os.environ[k]
        rx = Receiver(self, "pyroscope", {
            "name": "tok.app{}", "sample_rate": "100", "spy_name": "pprofkit-python",
            "bearer": "tok-1", "sample_types": PY_TYPES_JSON, "totals": TOTALS, "count": 1,
            "limit": GUARD})
        r = self.recorder()
        r.add_pyroscope_sink(server_address=rx.url, application_name="tok.app",
                             auth_token="tok-1")
        record(r)
        r.close()
        self.assertEqual(rx.finish(), 0)

    def test_malformed(self):
        r = self.recorder()
        for var, value in [("PYROSCOPE_APPLICATION_NAME", "app{x}"),
                           ("PYROSCOPE_AUTH_TOKEN", "tok\nX-Injected: 1"),
                           ("PYROSCOPE_SERVER_ADDRESS", "localhost:4040")]:
            with self.subTest(var=var):
                os.environ[var] = value
                try:
                    with self.assertRaises(pprofkit.InvalidArgumentError) as cm:
                        r.add_pyroscope_sink(application_name="app")
                finally:
                    del os.environ[var]
                self.assertIn(var, str(cm.exception))
        for kw, field in [(dict(), "application_name"),
                          (dict(application_name="app", tags="novalue"), "tags"),
                          (dict(application_name="app", queue_len=0), "queue_len")]:
            with self.subTest(field=field):
                with self.assertRaises(pprofkit.InvalidArgumentError) as cm:
                    r.add_pyroscope_sink(**kw)
                self.assertEqual(cm.exception.code, EINVAL)
                self.assertIn(field, str(cm.exception))


class TestOtlp(UploadBase):
    def test_upload_partial_success(self):
        rx = Receiver(self, "otlp", {
            "service_name": "py-svc", "sdk_language": "python", "attributes": {"a": "1"},
            "partial": {"rejected": 3, "message": "3 too old"}, "count": 1, "limit": GUARD})
        r = self.recorder()
        sink = r.add_otlp_sink(endpoint=rx.url, service_name="py-svc",
                               resource_attributes="a=1")
        self.assertEqual(sink.kind, "otlp")
        record(r)
        r.export_to_sinks()
        self.assertTrue(sink.flush(timeout_ms=GUARD * 1000))
        st = sink.stats()
        self.assertEqual((st["sent"], st["partial_successes"], st["rejected_profiles"]),
                         (1, 1, 3), st)
        conserved(self, st)
        r.close()
        self.assertEqual(rx.finish(), 0)

    def test_malformed(self):
        r = self.recorder()
        os.environ["OTEL_EXPORTER_OTLP_HEADERS"] = "novalue"
        with self.assertRaises(pprofkit.InvalidArgumentError) as cm:
            r.add_otlp_sink()
        self.assertIn("OTEL_EXPORTER_OTLP_HEADERS", str(cm.exception))
        r.add_otlp_sink(from_env=False).stats()  # the variable is not read
        del os.environ["OTEL_EXPORTER_OTLP_HEADERS"]
        for kw, field in [(dict(headers="k=%0A"), "headers"),
                          (dict(resource_attributes="=v"), "resource.attributes"),
                          (dict(endpoint="ftp://x"), "endpoint")]:
            with self.subTest(field=field):
                with self.assertRaises(pprofkit.InvalidArgumentError) as cm:
                    r.add_otlp_sink(**kw)
                self.assertEqual(cm.exception.code, EINVAL)
                self.assertIn(field, str(cm.exception))
        with self.assertRaises(TypeError):
            r.add_otlp_sink(resource={"service.name": "x"})


class TestFailures(UploadBase):
    def test_unreachable_server_is_counted(self):
        r = self.recorder(export_period_ms=20)
        sink = r.add_datadog_sink(agent_url="http://127.0.0.1:%d" % closed_port(),
                                  retry_backoff_ms=1, connect_timeout_ms=GUARD * 1000,
                                  queue_len=64)
        # The flush path never sees the network: flushes, exports and the background
        # exporter go on, and every failure is counted.
        record(r)
        self.assertIsNone(r.export_to_sinks())
        self.assertTrue(sink.flush(timeout_ms=GUARD * 1000))
        st = sink.stats()
        self.assertEqual(st["queued"], 1)
        self.assertEqual(st["sent"], 0)
        self.assertEqual(st["dropped_failed"], 1)
        self.assertEqual(st["attempts"], 2)
        self.assertEqual(st["retries"], 1)
        self.assertEqual(st["fail_connect"], 2)
        self.assertEqual(st["last_http_status"], 0)
        conserved(self, st)

        r.start()
        deadline = time.monotonic() + GUARD
        while sink.stats()["dropped_failed"] < 3:
            record(r)
            self.assertLess(time.monotonic(), deadline, "the exporter uploads nothing")
            time.sleep(0.01)
        r.stop()
        self.assertTrue(sink.flush(timeout_ms=GUARD * 1000))
        st = sink.stats()
        self.assertEqual(st["sent"], 0)
        self.assertEqual(st["fail_connect"], st["attempts"])
        self.assertEqual(st["dropped_failed"] + st["dropped_queue_full"], st["queued"])
        conserved(self, st)
        rs = r.stats()
        self.assertEqual(rs["sink_failures"], 0)  # a write only queues
        self.assertEqual(rs["samples_flushed"], rs["samples_exported"])
        r.close()

    def test_profiler_stop_counts_every_window(self):
        # Three upload sinks whose server takes the connections and never answers: the
        # profiler's stop shuts them down together, then reads their statistics, which
        # account for every window (none still queued or in flight: each sent or
        # dropped; the figures were read before the shutdown dropped the rest).
        srv = socket.socket()
        self.addCleanup(srv.close)
        srv.bind(("127.0.0.1", 0))
        srv.listen(64)  # the kernel completes the connections; nobody reads them
        url = "http://127.0.0.1:%d" % srv.getsockname()[1]
        p = pprofkit.Profiler(out_dir=None, export_period=0.2, datadog=url, pyroscope=url,
                              otlp=url)
        p.start()
        time.sleep(0.5)
        uploads = p.stop()["uploads"]
        self.assertEqual(sorted(u["kind"] for u in uploads), ["datadog", "otlp", "pyroscope"])
        for u in uploads:
            self.assertGreater(u["queued"], 0, u)
            self.assertEqual((u["sent"], u["queue_len"]), (0, 0), u)
            self.assertGreater(u["dropped_shutdown"], 0, u)
            conserved(self, u)

    def test_http_errors_are_counted(self):
        for status, retried, key in [(503, True, "fail_http_5xx"),
                                     (413, False, "fail_http_4xx")]:
            with self.subTest(status=status):
                rx = Receiver(self, "status", {"status": status, "limit": GUARD})
                r = self.recorder()
                sink = r.add_pyroscope_sink(server_address=rx.url, application_name="app",
                                            retry_backoff_ms=1)
                record(r)
                r.export_to_sinks()
                self.assertTrue(sink.flush(timeout_ms=GUARD * 1000))
                st = sink.stats()
                attempts = 2 if retried else 1
                self.assertEqual(st["attempts"], attempts)
                self.assertEqual(st[key], attempts)
                self.assertEqual(st["dropped_failed"], 1)
                self.assertEqual(st["sent"], 0)
                self.assertEqual(st["last_http_status"], status)
                conserved(self, st)
                record(r)
                r.close()
                self.assertEqual(rx.finish(stop=True), 0)
                # close() uploaded the last window too, and it failed the same way.
                self.assertEqual(rx.got, 2 * attempts)

    def test_close_drains_the_queue(self):
        # The receiver holds its first answer for a second: the exports queue up
        # behind it, and close() must send them all before it returns.
        rx = Receiver(self, "datadog", dd_expect(count=3, delay_first=1.0,
                                                 tags={"service": "drain"}))
        r = self.recorder()
        r.add_datadog_sink(agent_url=rx.url, service="drain", queue_len=8,
                           shutdown_timeout_ms=GUARD * 1000, timeout_ms=GUARD * 1000)
        for _ in range(2):
            record(r)
            r.export_to_sinks()
        record(r)
        r.close()  # exports the third window, then waits for the queue
        self.assertEqual(rx.finish(), 0)
        self.assertEqual(rx.got, 3)


def run_child(test, fn):
    """Forks; the child runs fn() and pipes back its pickled result, then os._exit.
    Fails if the child raised, died or hung (then it is killed); always reaps it."""
    rfd, wfd = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(rfd)
            try:
                payload = pickle.dumps(("ok", fn()))
                code = 0
            except BaseException:
                payload = pickle.dumps(("error", traceback.format_exc()))
            with os.fdopen(wfd, "wb") as f:
                f.write(payload)
        finally:
            os._exit(code)
    os.close(wfd)
    deadline = time.monotonic() + GUARD
    data = b""
    try:
        while time.monotonic() < deadline:
            if select.select([rfd], [], [], 0.05)[0]:
                b = os.read(rfd, 65536)
                if not b:
                    break
                data += b
        while time.monotonic() < deadline:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                break
            time.sleep(0.01)
        else:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            test.fail("the child hung")
    finally:
        os.close(rfd)
    test.assertTrue(data, "the child died without a result")
    kind, value = pickle.loads(data)
    if kind == "error":
        test.fail("in the child:\n" + value)
    return value


class TestFork(UploadBase):
    def test_child_uploads_its_own(self):
        """A sink made before fork() works in the child: the receiver sees one upload
        from each process (distinct process_id and runtime-id)."""
        rx = Receiver(self, "datadog", dd_expect(count=3, distinct_pids=2,
                                                 tags={"service": "forked"}))
        r = self.recorder()
        sink = r.add_datadog_sink(agent_url=rx.url, service="forked",
                                  timeout_ms=GUARD * 1000)
        record(r)
        r.export_to_sinks()  # starts the uploader thread before the fork
        self.assertTrue(sink.flush(timeout_ms=GUARD * 1000))
        record(r)  # the parent's, in the window at the fork

        def child():
            st0 = sink.stats()
            record(r)
            r.close()  # exports the child's window and waits for its upload
            return st0

        st0 = run_child(self, child)
        self.assertEqual(st0["queued"], 0)  # the child's counters start at the fork
        self.assertEqual(st0["sent"], 0)
        st = sink.stats()  # the parent's counters are its own
        self.assertEqual(st["queued"], 1)
        self.assertEqual(st["sent"], 1)
        r.close()  # uploads the window the parent had at the fork
        self.assertEqual(rx.finish(), 0)
        self.assertEqual(rx.got, 3)

    def test_flush_times_out(self):
        """flush(timeout_ms) with an upload in flight that the server never answers:
        False after the timeout (PPK_ETIMEDOUT), not an error."""
        rx = Receiver(self, "hang", {"limit": GUARD})
        r = self.recorder()
        sink = r.add_datadog_sink(agent_url=rx.url, service="flush", timeout_ms=GUARD * 1000,
                                  shutdown_timeout_ms=100)
        record(r)
        self.assertIsNone(r.export_to_sinks())
        self.assertEqual(rx.lines.get(timeout=GUARD), "GOT 1")
        self.assertFalse(sink.flush(timeout_ms=200))
        self.assertEqual(sink.stats()["sent"], 0)
        r.close()
        rx.finish(stop=True)

    def test_fork_while_closing(self):
        """fork() while another thread is inside close(), draining an upload the server
        never answers: the child's recorder and sink work, and its close() returns."""
        rx = Receiver(self, "hang", {"limit": GUARD})
        r = self.recorder()
        r.add_datadog_sink(agent_url=rx.url, service="closing", timeout_ms=GUARD * 1000,
                           shutdown_timeout_ms=2500)
        record(r)
        closer = threading.Thread(target=r.close, daemon=True)
        closer.start()
        # The upload is in flight, and close() is waiting for it.
        self.assertEqual(rx.lines.get(timeout=GUARD), "GOT 1")
        deadline = time.monotonic() + GUARD
        while True:
            try:
                r.stats()
            except pprofkit.ClosedError:
                break
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.001)
        self.assertFalse(r.closed)

        def child():
            st0 = r.stats()  # the close() of the parent's thread is not the child's
            record(r)
            data = r.export().data
            st = r.stats()
            r.close()
            return st0, st, data, r.closed

        st0, st, data, closed = run_child(self, child)
        self.assertEqual(st0["samples_flushed"], 0)
        self.assertEqual(st["samples_flushed"], 3)
        self.assertEqual(st["samples_exported"], 3)
        p = support.decode(data)
        self.assertEqual([p.total(t) for t, _ in TYPES], TOTALS)
        self.assertTrue(closed)
        closer.join(GUARD)
        self.assertFalse(closer.is_alive(), "close() hung in the parent")
        self.assertTrue(r.closed)
        rx.finish(stop=True)


if __name__ == "__main__":
    unittest.main()
