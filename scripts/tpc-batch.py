#!/usr/bin/env python3
"""An FTS-like batch of HTTP third-party copies (issue 37's benchmark).

FTS3 runs a job's files as many transfers at once, each a COPY to one
endpoint (pull mode: to the destination, with Source: and the source's token
in TransferHeaderAuthorization), checking adler32 at both ends. gfal2's own
bulk copy runs the files one after another in one process and spends about
0.2 s of its own CPU on each, so it measures gfal, not the endpoints. This
driver keeps what an FTS server does per file and nothing more:

  per file: HEAD source (Want-Digest: adler32), MKCOL of the destination's
            directories not made yet (FTS's create-parent, once per
            directory in the batch), COPY to the destination,
            its marker stream read to success/failure, HEAD destination
            (Want-Digest: adler32) compared with the source's

over CONCURRENCY kept-alive HTTPS connections to each endpoint (as FTS's
url-copy processes each keep theirs), from one process.

  tpc-batch.py LIST CAFILE TOKEN [CONCURRENCY] [MODE]
    LIST: lines "SOURCE_URL<TAB>DEST_URL" (https://); MODE pull (default) or push
Exit 0 when every copy succeeded with equal checksums, 1 otherwise (the
first failures on stderr). Prints "files=N seconds=S".
"""
import http.client
import queue
import ssl
import sys
import threading
import time
import urllib.parse


def conn_for(url, ctx, cache):
    u = urllib.parse.urlsplit(url)
    key = (u.hostname, u.port or 443)
    c = cache.get(key)
    if c is None:
        c = http.client.HTTPSConnection(u.hostname, u.port or 443, context=ctx, timeout=600)
        cache[key] = c
    return c, (u.path or "/")


def request(cache, ctx, method, url, headers):
    """One request on this thread's kept-alive connection (reopened once)."""
    for attempt in (0, 1):
        c, path = conn_for(url, ctx, cache)
        try:
            c.request(method, path, headers=headers)
            r = c.getresponse()
            body = r.read()
            return r, body
        except (http.client.HTTPException, OSError):
            c.close()
            cache.pop((urllib.parse.urlsplit(url).hostname, urllib.parse.urlsplit(url).port or 443), None)
            if attempt:
                raise
    raise RuntimeError("unreachable")


def adler32_of(cache, ctx, url, token):
    r, _ = request(cache, ctx, "HEAD", url, {"Authorization": f"Bearer {token}", "Want-Digest": "adler32"})
    if r.status != 200:
        return None, f"HEAD {url}: {r.status}"
    for part in (r.getheader("Digest") or "").split(","):
        k, _, v = part.strip().partition("=")
        if k.lower() == "adler32":
            return v.lower().lstrip("0"), None
    return None, f"HEAD {url}: no adler32"


MADE = set()
MADE_LOCK = threading.Lock()


def make_parents(cache, ctx, url, token):
    """MKCOL each directory above `url` not made yet by this batch."""
    u = urllib.parse.urlsplit(url)
    parts = u.path.strip("/").split("/")[:-1]
    for i in range(1, len(parts) + 1):
        d = urllib.parse.urlunsplit((u.scheme, u.netloc, "/" + "/".join(parts[:i]) + "/", "", ""))
        with MADE_LOCK:  # held while made: nobody copies into it before
            if d in MADE:
                continue
            r, _ = request(cache, ctx, "MKCOL", d, {"Authorization": f"Bearer {token}"})
            if r.status not in (200, 201, 405):
                return f"MKCOL {d}: {r.status}"
            MADE.add(d)
    return None


def copy_one(cache, ctx, src, dst, token, mode):
    theirs, err = adler32_of(cache, ctx, src, token)
    if err:
        return err
    err = make_parents(cache, ctx, dst, token)
    if err:
        return err
    auth = f"Bearer {token}"
    if mode == "pull":
        target, headers = dst, {"Source": src}
    else:
        target, headers = src, {"Destination": dst}
    headers.update({"Authorization": auth, "TransferHeaderAuthorization": auth,
                    "Credential": "none", "X-Number-Of-Streams": "1"})
    r, body = request(cache, ctx, "COPY", target, headers)
    text = body.decode("utf-8", "replace")
    if r.status // 100 != 2:
        return f"COPY {target}: {r.status} {text[:200]}"
    last = [l for l in text.splitlines() if l.strip()][-1:] or [""]
    if not last[0].startswith("success"):
        return f"COPY {target}: {last[0][:300]}"
    ours, err = adler32_of(cache, ctx, dst, token)
    if err:
        return err
    if ours != theirs:
        return f"{dst}: adler32 {ours} != source {theirs}"
    return None


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    pairs = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
    ctx = ssl.create_default_context(cafile=sys.argv[2])
    token = sys.argv[3]
    concurrency = int(sys.argv[4]) if len(sys.argv) > 4 else 8
    mode = sys.argv[5] if len(sys.argv) > 5 else "pull"
    work = queue.Queue()
    for p in pairs:
        work.put(p)
    failures = []
    lock = threading.Lock()

    def worker():
        cache = {}
        while True:
            try:
                src, dst = work.get_nowait()
            except queue.Empty:
                return
            try:
                err = copy_one(cache, ctx, src, dst, token, mode)
            except Exception as e:  # a broken connection, a timeout
                err = f"{src}: {e}"
            if err:
                with lock:
                    failures.append(err)

    started = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.monotonic() - started
    for f in failures[:5]:
        print(f, file=sys.stderr)
    print(f"files={len(pairs)} seconds={took:.3f} failures={len(failures)}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
