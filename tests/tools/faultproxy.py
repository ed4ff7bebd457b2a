#!/usr/bin/python3
"""faultproxy: a fault-injecting HTTP/1.1 reverse proxy for stoker's tests.

Forwards every request to one upstream (http:// or https://) with its request
line and headers byte for byte (Host, Authorization, x-amz-*, Range), so a
client that signs SigV4 for the proxy's host:port still verifies upstream.
Bodies stream in both directions (splice(2) where the fault allows it, else
1 MiB reads); keep-alive on both sides; one thread per client connection.

Faults (decided per request, in arrival order, from one seeded generator):
  --latency-ms M --jitter-ms J  delay each request by U[M-J, M+J] ms
  --fail-first N                the first N matching requests get 503
  --p500 P                      reply 500 or 503
  --p429 P                      reply 429 with Retry-After: 1
  --p-reset P                   RST (SO_LINGER 0) after the request, or mid-body
  --p-truncate P                real headers, part of the body, then FIN
  --p-corrupt P                 flip one byte of the body
  --only-path S                 faults only for paths containing S
The probabilities share one draw, so at most one fault hits a request.
Body faults hit only 200/206 responses with a Content-Length body.

Control: GET /__proxy/stats (JSON counters), GET /__proxy/config,
POST /__proxy/config (a JSON object of option names, '-' or '_'),
POST /__proxy/reset (zero the counters). These never fault nor count.
"""
import argparse
import json
import os
import random
import select
import socket
import ssl
import struct
import sys
import threading
import time
import urllib.parse

BUF = 1 << 20
MAX_HEAD = 64 << 10
HAVE_SPLICE = hasattr(os, "splice")

OPTIONS = {  # name: type
    "latency_ms": float, "jitter_ms": float, "p500": float, "p429": float,
    "p_reset": float, "p_truncate": float, "p_corrupt": float,
    "seed": int, "fail_first": int, "only_path": str,
}
COUNTERS = ("requests", "forwarded", "e500", "e429", "resets", "truncated",
            "corrupted", "bytes", "bytes_up", "upstream_errors", "connections")


class Closed(Exception):
    pass


class BadRequest(Exception):
    pass


class Stream:
    """A socket and the bytes read from it that nobody consumed yet."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = bytearray()
        self.can_splice = HAVE_SPLICE and not isinstance(sock, ssl.SSLSocket)

    def fill(self):
        data = self.sock.recv(65536)
        if not data:
            raise Closed()
        self.buf += data

    def read_head(self):
        """One message head (through the blank line), or None on a clean EOF."""
        while True:
            while self.buf[:2] == b"\r\n":  # stray CRLF between messages
                del self.buf[:2]
            i = self.buf.find(b"\r\n\r\n")
            if i >= 0:
                head = bytes(self.buf[:i + 4])
                del self.buf[:i + 4]
                return head
            if len(self.buf) > MAX_HEAD:
                raise BadRequest("header too large")
            try:
                data = self.sock.recv(65536)
            except ConnectionError:
                data = b""
            if not data:
                if self.buf:
                    raise Closed()
                return None
            self.buf += data

    def readline(self):
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                line = bytes(self.buf[:i + 2])
                del self.buf[:i + 2]
                return line
            if len(self.buf) > MAX_HEAD:
                raise BadRequest("line too long")
            self.fill()

    def stale(self):
        """True when an idle upstream connection was closed (or sent junk)."""
        if self.buf:
            return True
        if isinstance(self.sock, ssl.SSLSocket) and self.sock.pending():
            return True
        r, _, _ = select.select([self.sock], [], [], 0)
        return bool(r)


def parse_head(head):
    lines = head[:-4].split(b"\r\n")
    first = lines[0].decode("latin-1").split(" ", 2)
    hdrs = {}
    for ln in lines[1:]:
        name, sep, value = ln.partition(b":")
        if not sep:
            raise BadRequest("bad header line")
        key = name.strip().decode("latin-1").lower()
        val = value.strip().decode("latin-1")
        if key in hdrs and key in ("connection", "transfer-encoding"):
            hdrs[key] += ", " + val
        else:
            hdrs[key] = val
    return first, hdrs


def tokens(value):
    return {t.strip().lower() for t in value.split(",") if t.strip()}


def keepalive(version, hdrs):
    conn = tokens(hdrs.get("connection", ""))
    if version.upper() == "HTTP/1.0":
        return "keep-alive" in conn
    return "close" not in conn


def body_framing(hdrs):
    """('chunked', None), ('length', n) or ('length', 0)."""
    te = hdrs.get("transfer-encoding")
    if te and "chunked" in tokens(te):
        return "chunked", None
    cl = hdrs.get("content-length")
    if cl is not None:
        try:
            n = int(cl.split(",")[0])
        except ValueError:
            raise BadRequest("bad content-length")
        if n < 0:
            raise BadRequest("bad content-length")
        return "length", n
    return "length", 0


def rst(sock):
    """Close with a TCP reset instead of a FIN."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


class Pipe:
    """A pipe for splice(2), one per connection thread."""

    def __init__(self):
        self.r, self.w = os.pipe()
        try:
            import fcntl
            fcntl.fcntl(self.w, fcntl.F_SETPIPE_SZ, BUF)
        except (OSError, AttributeError, ImportError):
            pass

    def close(self):
        os.close(self.r)
        os.close(self.w)


def pump(src, dst, n, pipe=None, corrupt_at=None):
    """Copy n bytes from Stream src to socket dst; returns bytes copied.
    corrupt_at: offset of one byte to flip. Raises Closed on an early EOF."""
    done = 0
    if src.buf and n:
        take = min(len(src.buf), n)
        chunk = src.buf[:take]
        del src.buf[:take]
        if corrupt_at is not None and corrupt_at < take:
            chunk[corrupt_at] ^= 0xFF
        dst.sendall(chunk)
        done = take
    if done < n and pipe is not None and src.can_splice and not isinstance(dst, ssl.SSLSocket) \
            and (corrupt_at is None or corrupt_at < done):
        sfd, dfd = src.sock.fileno(), dst.fileno()
        while done < n:
            got = os.splice(sfd, pipe.w, min(BUF, n - done))
            if got == 0:
                raise Closed()
            left = got
            while left:
                left -= os.splice(pipe.r, dfd, left)
            done += got
        return done
    buf = bytearray(BUF)
    view = memoryview(buf)
    while done < n:
        got = src.sock.recv_into(buf, min(BUF, n - done))
        if got == 0:
            raise Closed()
        if corrupt_at is not None and done <= corrupt_at < done + got:
            buf[corrupt_at - done] ^= 0xFF
        dst.sendall(view[:got])
        done += got
    return done


def pump_chunked(src, dst, pipe=None):
    """Forward a chunked body verbatim; returns the payload bytes."""
    total = 0
    while True:
        line = src.readline()
        dst.sendall(line)
        try:
            size = int(line.split(b";")[0].strip(), 16)
        except ValueError:
            raise BadRequest("bad chunk size")
        if size == 0:
            while True:
                t = src.readline()
                dst.sendall(t)
                if t == b"\r\n":
                    return total
        pump(src, dst, size + 2, pipe)
        total += size


def pump_until_close(src, dst):
    total = 0
    if src.buf:
        dst.sendall(src.buf)
        total += len(src.buf)
        src.buf.clear()
    while True:
        data = src.sock.recv(BUF)
        if not data:
            return total
        dst.sendall(data)
        total += len(data)


def reply(sock, status, reason, body, extra=(), close=False, ctype="text/plain"):
    body = body.encode() if isinstance(body, str) else body
    lines = ["HTTP/1.1 %d %s" % (status, reason), "Content-Type: " + ctype,
             "Content-Length: %d" % len(body)]
    lines += list(extra)
    if close:
        lines.append("Connection: close")
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)


class Proxy:
    def __init__(self, upstream, cfg, cafile=None):
        u = urllib.parse.urlsplit(upstream)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise BadRequest("upstream must be http://HOST:PORT or https://HOST:PORT")
        if u.path not in ("", "/"):
            raise BadRequest("the upstream URL takes no path; request paths pass through")
        self.up_host = u.hostname
        self.up_port = u.port or (443 if u.scheme == "https" else 80)
        self.tls = None
        if u.scheme == "https":
            self.tls = ssl.create_default_context(cafile=cafile or os.environ.get("SSL_CERT_FILE"))
        self.lock = threading.Lock()
        self.cfg = dict(latency_ms=0.0, jitter_ms=0.0, p500=0.0, p429=0.0, p_reset=0.0,
                        p_truncate=0.0, p_corrupt=0.0, seed=0, fail_first=0, only_path="")
        self.rng = random.Random(0)
        self.set_config(cfg)
        self.stats = dict.fromkeys(COUNTERS, 0)

    # -- configuration and counters ---------------------------------------
    def set_config(self, changes):
        clean = {}
        for k, v in changes.items():
            key = k.replace("-", "_")
            if key not in OPTIONS:
                raise BadRequest("unknown option " + k)
            try:
                clean[key] = OPTIONS[key](v) if v is not None else OPTIONS[key]()
            except (TypeError, ValueError):
                raise BadRequest("bad value for " + k)
        for key in ("p500", "p429", "p_reset", "p_truncate", "p_corrupt"):
            if key in clean and not 0.0 <= clean[key] <= 1.0:
                raise BadRequest(key + " must be in [0, 1]")
        with self.lock:
            self.cfg.update(clean)
            if "seed" in clean:
                self.rng = random.Random(clean["seed"])
            return dict(self.cfg)

    def count(self, key, n=1):
        with self.lock:
            self.stats[key] += n

    def decide(self, path):
        """(delay seconds, fault or None, a generator for the fault's details)."""
        with self.lock:
            c = self.cfg
            self.stats["requests"] += 1
            delay = 0.0
            if c["latency_ms"] or c["jitter_ms"]:
                lo, hi = c["latency_ms"] - c["jitter_ms"], c["latency_ms"] + c["jitter_ms"]
                delay = max(0.0, self.rng.uniform(lo, hi)) / 1000.0
            if c["only_path"] and c["only_path"] not in path:
                return delay, None, None
            if c["fail_first"] > 0:
                c["fail_first"] -= 1
                return delay, "503", None
            r = self.rng.random()
            sub = random.Random(self.rng.getrandbits(64))
            for key, fault in (("p_reset", "reset"), ("p500", "5xx"), ("p429", "429"),
                               ("p_truncate", "truncate"), ("p_corrupt", "corrupt")):
                if r < c[key]:
                    if fault == "reset":
                        fault = "reset-early" if sub.random() < 0.5 else "reset-mid"
                    elif fault == "5xx":
                        fault = "500" if sub.random() < 0.5 else "503"
                    return delay, fault, sub
                r -= c[key]
            return delay, None, None

    # -- connections --------------------------------------------------------
    def connect_upstream(self):
        s = socket.create_connection((self.up_host, self.up_port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.tls:
            s = self.tls.wrap_socket(s, server_hostname=self.up_host)
        return Stream(s)

    def admin(self, client, method, target, hdrs, keep):
        path = urllib.parse.urlsplit(target).path
        kind, n = body_framing(hdrs)
        body = b""
        if kind == "length":
            while len(client.buf) < n:
                client.fill()
            body = bytes(client.buf[:n])
            del client.buf[:n]
        else:
            raise BadRequest("chunked control bodies are not supported")
        close = not keep
        if path == "/__proxy/stats" and method in ("GET", "HEAD"):
            with self.lock:
                out = dict(self.stats)
        elif path == "/__proxy/config" and method == "GET":
            with self.lock:
                out = dict(self.cfg)
        elif path == "/__proxy/config" and method in ("POST", "PUT"):
            try:
                changes = json.loads(body or b"{}")
                if not isinstance(changes, dict):
                    raise ValueError
            except ValueError:
                reply(client.sock, 400, "Bad Request", "expected a JSON object\n", close=close)
                return
            try:
                out = self.set_config(changes)
            except BadRequest as e:
                reply(client.sock, 400, "Bad Request", str(e) + "\n", close=close)
                return
        elif path == "/__proxy/reset" and method == "POST":
            with self.lock:
                self.stats = dict.fromkeys(COUNTERS, 0)
                out = dict(self.stats)
        else:
            reply(client.sock, 404, "Not Found", "unknown control path\n", close=close)
            return
        reply(client.sock, 200, "OK", json.dumps(out, sort_keys=True) + "\n", close=close,
              ctype="application/json")

    def discard_body(self, client, hdrs, expect):
        """Read and drop a request body we will not forward; False when the
        connection must close instead (Expect: 100-continue, or chunked)."""
        if expect:
            return False
        kind, n = body_framing(hdrs)
        if kind == "chunked":
            return False
        while n:
            if client.buf:
                take = min(n, len(client.buf))
                del client.buf[:take]
                n -= take
            else:
                client.fill()
        return True

    def serve_client(self, csock):
        self.count("connections")
        csock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        client = Stream(csock)
        up = None
        pipe = Pipe() if HAVE_SPLICE else None
        try:
            while True:
                try:
                    head = client.read_head()
                except BadRequest:
                    reply(csock, 431, "Request Header Fields Too Large", "", close=True)
                    return
                if head is None:
                    return
                try:
                    (method, target, version), hdrs = parse_head(head)
                except (BadRequest, ValueError):
                    reply(csock, 400, "Bad Request", "", close=True)
                    return
                keep = keepalive(version, hdrs)
                if target.startswith("/__proxy/"):
                    self.admin(client, method, target, hdrs, keep)
                    if not keep:
                        return
                    continue
                expect = "100-continue" in hdrs.get("expect", "").lower()
                delay, fault, sub = self.decide(urllib.parse.urlsplit(target).path)
                if delay:
                    time.sleep(delay)
                if fault == "reset-early":
                    self.discard_body(client, hdrs, expect)
                    self.count("resets")
                    rst(csock)
                    csock = None
                    return
                if fault in ("500", "503", "429"):
                    ok = self.discard_body(client, hdrs, expect)
                    if fault == "429":
                        self.count("e429")
                        reply(csock, 429, "Too Many Requests", "faultproxy: injected 429\n",
                              ["Retry-After: 1", "X-Faultproxy: 429"], close=not (ok and keep))
                    else:
                        self.count("e500")
                        reason = "Internal Server Error" if fault == "500" else "Service Unavailable"
                        reply(csock, int(fault), reason, "faultproxy: injected %s\n" % fault,
                              ["X-Faultproxy: " + fault], close=not (ok and keep))
                    if not (ok and keep):
                        return
                    continue
                up, resp_head, close_after = self.forward(client, up, head, hdrs, expect, pipe)
                if resp_head is None:
                    return
                self.count("forwarded")
                (rversion, status, _reason), rhdrs = parse_head(resp_head)
                status = int(status)
                up_keep = keepalive(rversion, rhdrs) and not close_after
                if "close" in tokens(rhdrs.get("connection", "")):
                    keep = False
                if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
                    kind, n = "length", 0
                else:
                    te = rhdrs.get("transfer-encoding")
                    if te and "chunked" in tokens(te):
                        kind, n = "chunked", None
                    elif rhdrs.get("content-length") is not None:
                        kind, n = body_framing(rhdrs)
                    else:
                        kind, n = "close", None
                        up_keep = keep = False
                body_fault = fault if (fault in ("reset-mid", "truncate", "corrupt")
                                       and status in (200, 206) and kind == "length"
                                       and n > 0) else None
                csock.sendall(resp_head)
                if body_fault == "corrupt":
                    at = sub.randrange(n)
                    self.count("bytes", pump(up, csock, n, None, corrupt_at=at))
                    self.count("corrupted")
                elif body_fault:
                    part = sub.randrange(n)
                    self.count("bytes", pump(up, csock, part, pipe))
                    rst(up.sock)
                    up = None
                    if body_fault == "reset-mid":
                        self.count("resets")
                        rst(csock)
                    else:
                        self.count("truncated")
                        csock.shutdown(socket.SHUT_RDWR)
                        csock.close()
                    csock = None
                    return
                elif kind == "length":
                    self.count("bytes", pump(up, csock, n, pipe))
                elif kind == "chunked":
                    self.count("bytes", pump_chunked(up, csock, pipe))
                else:
                    self.count("bytes", pump_until_close(up, csock))
                if not up_keep:
                    up.sock.close()
                    up = None
                if not keep:
                    return
        except (Closed, OSError, BadRequest):
            return
        finally:
            if up is not None:
                try:
                    up.sock.close()
                except OSError:
                    pass
            if csock is not None:
                try:
                    csock.close()
                except OSError:
                    pass
            if pipe is not None:
                pipe.close()

    def forward(self, client, up, head, hdrs, expect, pipe):
        """Send one request upstream; returns (upstream, final response head or
        None, close_after). Retries once on a fresh connection when a reused
        one turns out closed before any byte of the answer."""
        kind, n = body_framing(hdrs)
        for attempt in (0, 1):
            reused = up is not None
            if up is not None and up.stale():
                up.sock.close()
                up = None
                reused = False
            if up is None:
                try:
                    up = self.connect_upstream()
                except OSError as e:
                    self.count("upstream_errors")
                    self.discard_body(client, hdrs, expect)
                    reply(client.sock, 502, "Bad Gateway", "faultproxy: upstream: %s\n" % e,
                          ["X-Faultproxy: upstream"], close=True)
                    return None, None, True
            body_sent = False
            try:
                up.sock.sendall(head)
                if expect and not up.buf and not select.select([up.sock], [], [], 1.0)[0]:
                    expect = False  # no interim answer in 1 s: send the body (as curl does)
                if not expect:
                    body_sent = bool(n) or kind == "chunked"  # (started: no retry then)
                    if kind == "chunked":
                        self.count("bytes_up", pump_chunked(client, up.sock, pipe))
                    elif n:
                        self.count("bytes_up", pump(client, up.sock, n, pipe))
                resp = up.read_head()
                if resp is None:
                    raise Closed()
            except (Closed, ConnectionError):
                up.sock.close()
                up = None
                if reused and not body_sent and attempt == 0:
                    continue
                self.count("upstream_errors")
                reply(client.sock, 502, "Bad Gateway", "faultproxy: upstream closed\n",
                      ["X-Faultproxy: upstream"], close=True)
                return None, None, True
            close_after = False
            while True:
                (_, status, _), _ = parse_head(resp)
                status = int(status)
                if status == 100 and expect:
                    client.sock.sendall(resp)
                    if kind == "chunked":
                        self.count("bytes_up", pump_chunked(client, up.sock, pipe))
                    elif n:
                        self.count("bytes_up", pump(client, up.sock, n, pipe))
                    expect = False
                elif 100 <= status < 200 and status != 101:
                    client.sock.sendall(resp)
                else:
                    break
                resp = up.read_head()
                if resp is None:
                    raise Closed()
            if expect and (n or kind == "chunked"):
                # final answer before the body was sent: the client may or may
                # not send it now; close both sides after this response.
                close_after = True
            return up, resp, close_after
        return None, None, True


def main():
    ap = argparse.ArgumentParser(description="fault-injecting HTTP/1.1 reverse proxy")
    ap.add_argument("upstream", help="http://HOST:PORT or https://HOST:PORT")
    ap.add_argument("--listen", default="127.0.0.1", help="address (default 127.0.0.1)")
    ap.add_argument("--port", type=int, default=0, help="port (default: any free one)")
    ap.add_argument("--fd", type=int, help="an inherited listening socket to use instead")
    ap.add_argument("--upstream-ca", help="CA file for an https upstream (default $SSL_CERT_FILE)")
    ap.add_argument("--latency-ms", type=float, default=0.0)
    ap.add_argument("--jitter-ms", type=float, default=0.0)
    ap.add_argument("--p500", type=float, default=0.0)
    ap.add_argument("--p429", type=float, default=0.0)
    ap.add_argument("--p-reset", type=float, default=0.0)
    ap.add_argument("--p-truncate", type=float, default=0.0)
    ap.add_argument("--p-corrupt", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fail-first", type=int, default=0)
    ap.add_argument("--only-path", default="")
    a = ap.parse_args()
    cfg = {k: getattr(a, k) for k in OPTIONS}
    try:  # four descriptors a client connection (client, upstream, a pipe)
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, ValueError, OSError):
        pass
    try:
        proxy = Proxy(a.upstream, cfg, a.upstream_ca)
    except BadRequest as e:
        ap.error(str(e))
    if a.fd is not None:
        ls = socket.socket(fileno=a.fd)
    else:
        ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind((a.listen, a.port))
    ls.listen(1024)
    host, port = ls.getsockname()[:2]
    print("http://%s:%d" % (host, port), flush=True)
    while True:
        try:
            c, _ = ls.accept()
        except InterruptedError:
            continue
        except OSError as e:
            print("faultproxy: accept: %s" % e, file=sys.stderr, flush=True)
            time.sleep(0.05)
            continue
        threading.Thread(target=proxy.serve_client, args=(c,), daemon=True).start()


if __name__ == "__main__":
    main()
