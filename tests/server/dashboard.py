#!/usr/bin/env python3
"""The dashboard (GET /) in headless Chromium against the real `strata serve`.

A server with --metrics, an API key, a spill directory and a RAM tier of 8 pages runs one long
streamed chat request (curl), so most of its pages go to disk. Chromium, driven over the
DevTools protocol (a small WebSocket client below: stdlib only), loads the page, is given the
key in its key field, and must show:
  - a strip for the running request (the id /slots gives it) with disk- and RAM-coloured cells,
    as many of each as /slots said in the two seconds before (the page refreshes every second);
  - the pool's used / cached / free / RAM / disk numbers within what /slots said then;
  - a generation rate in tok/s and "on" for metrics;
  - in a screenshot (PNG decoded here), pixels of the exact RAM and disk colours of dash.css
    inside the strip's box, and none of the disk colour in the chat box;
  - a chat reply streamed into the chat box through the page's own form, then a second turn
    whose prompt hits the prefix cache, and the hit rate /metrics' counters give;
and, against a second server started without --metrics, "metrics off".
Usage: dashboard.py STRATA_BIN. Exit 77 (skip) without chromium."""
import base64, json, os, shutil, socket, struct, subprocess, sys, tempfile, threading, time
import urllib.error, urllib.parse, urllib.request, zlib

RAM = (0x2a, 0x7d, 0xe1)   # dash.css --ram
DISK = (0xe8, 0x59, 0x0c)  # dash.css --disk
KEY = "dash-test-key"
EOS = 2                    # the built-in model's end-of-sequence token (src/model/synth.c)
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")

failures = []


def check(cond, what):
    print(("  ok   " if cond else "  FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def http(port, path, body=None, key=KEY):
    """(status, headers, body bytes) of a request to the server."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body)
    if key:
        req.add_header("Authorization", "Bearer " + key)
    if body is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def start_server(binary, args, tmp, name):
    log = open(os.path.join(tmp, name + ".log"), "w+")
    p = subprocess.Popen([binary, "serve", "--port", "0", "--chat-template", "chatml", "-c", "2048",
                          "-np", "2", "-t", "1"] + args, stdout=log, stderr=log)
    for _ in range(200):
        log.seek(0)
        text = log.read()
        if "listening on http://" in text:
            return p, int(text.split("listening on http://")[1].split(":")[1].split()[0])
        if p.poll() is not None:
            break
        time.sleep(0.05)
    p.kill()
    sys.exit("strata serve did not start: " + text)


# ---- a WebSocket client, enough for the DevTools protocol (RFC 6455: text frames, masked) ----

class WS:
    def __init__(self, url):
        u = urllib.parse.urlparse(url)
        self.s = socket.create_connection((u.hostname, u.port), timeout=20)
        key = base64.b64encode(os.urandom(16)).decode()
        self.s.sendall((f"GET {u.path} HTTP/1.1\r\nHost: {u.hostname}:{u.port}\r\nUpgrade: websocket\r\n"
                        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            c = self.s.recv(1)
            if not c:
                raise RuntimeError("websocket: closed during the handshake")
            head += c
        if b" 101 " not in head.split(b"\r\n")[0]:
            raise RuntimeError("websocket: " + head.decode(errors="replace"))
        self.next_id = 0

    def _exact(self, n):
        b = bytearray()
        while len(b) < n:
            c = self.s.recv(n - len(b))
            if not c:
                raise RuntimeError("websocket: closed")
            b += c
        return bytes(b)

    def _frame(self, op, data):
        n, mask = len(data), os.urandom(4)
        hdr = bytes([0x80 | op])
        hdr += bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack(">H", n) if n < 65536 \
            else bytes([0x80 | 127]) + struct.pack(">Q", n)
        body = bytes(b ^ mask[i & 3] for i, b in enumerate(data))
        self.s.sendall(hdr + mask + body)

    def recv(self):
        msg = b""
        while True:
            b0, b1 = self._exact(2)
            n = b1 & 0x7f
            if n == 126:
                n = struct.unpack(">H", self._exact(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._exact(8))[0]
            data = self._exact(n)  # a server's frames are not masked
            op = b0 & 0x0f
            if op == 9:
                self._frame(10, data)
                continue
            if op == 8:
                raise RuntimeError("websocket: closed by the browser")
            msg += data
            if b0 & 0x80:
                return msg.decode()

    def call(self, method, **params):
        self.next_id += 1
        self._frame(1, json.dumps({"id": self.next_id, "method": method, "params": params}).encode())
        while True:
            m = json.loads(self.recv())
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m["result"]

    def js(self, expr):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError("page: " + json.dumps(r["exceptionDetails"]))
        return r["result"].get("value")


def start_chromium(tmp):
    prof = os.path.join(tmp, "chromium")
    p = subprocess.Popen([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                          "--remote-debugging-port=0", "--user-data-dir=" + prof, "--window-size=1280,900",
                          "--force-device-scale-factor=1", "--force-color-profile=srgb", "about:blank"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    f = os.path.join(prof, "DevToolsActivePort")
    for _ in range(300):
        if os.path.exists(f) and len(open(f).read().split("\n")) >= 2:
            port = int(open(f).read().split("\n")[0])
            for _ in range(50):
                pages = [t for t in json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list"))
                         if t["type"] == "page"]
                if pages:
                    return p, WS(pages[0]["webSocketDebuggerUrl"])
                time.sleep(0.1)
        time.sleep(0.05)
    p.kill()
    sys.exit("chromium did not open its DevTools port")


# ---- PNG decoding (8-bit RGB or RGBA, no interlace: what Chromium writes) ----

def png_decode(png):
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, b""
    while pos < len(png):
        n, kind = struct.unpack(">I4s", png[pos:pos + 8])
        data = png[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", data)
            assert depth == 8 and ctype in (2, 6) and not interlace, f"PNG kind {depth}/{ctype}/{interlace}"
        elif kind == b"IDAT":
            idat += data
        pos += 12 + n
    bpp = 3 if ctype == 2 else 4
    raw, stride = zlib.decompress(idat), w * bpp
    rows, prev = [], bytearray(stride)
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + ((a + b) >> 1)) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return w, h, bpp, rows


def count_colour(img, box, rgb):
    w, h, bpp, rows = img
    x0, y0 = max(0, int(box["x"])), max(0, int(box["y"]))
    x1, y1 = min(w, int(box["x"] + box["w"]) + 1), min(h, int(box["y"] + box["h"]) + 1)
    want, n = bytes(rgb), 0
    for y in range(y0, y1):
        r = rows[y]
        for x in range(x0, x1):
            if r[x * bpp:x * bpp + 3] == want:
                n += 1
    return n


# What the page shows, read from its DOM in one go.
DOM_STATE = """(() => {
  const t = (id) => document.getElementById(id).textContent;
  const rect = (e) => { const r = e.getBoundingClientRect(); return {x: r.x, y: r.y, w: r.width, h: r.height}; };
  return {
    pool: {pages: t('pool-pages'), used: t('pool-used'), cached: t('pool-cached'), free: t('pool-free'),
           ram_pages: t('pool-ram'), hot: t('pool-hot'), cold: t('pool-cold')},
    hit: t('hit-rate'), gen: t('gen-rate'), metrics: t('metrics-state'), status: t('status'),
    chat: rect(document.getElementById('log')),
    slots: [...document.querySelectorAll('.slot')].map((s) => {
      const strip = s.querySelector('.strip');
      const n = (c) => strip.querySelectorAll('.' + c).length;
      return {id: Number(s.dataset.id), cells: strip.children.length, R: n('t-R'), D: n('t-D'),
              S: n('t-S'), s: n('t-s'), box: rect(strip)};
    }),
  };
})()"""


def main():
    binary = sys.argv[1]
    if not os.access(CHROMIUM, os.X_OK):
        print(f"SKIPPED: no {CHROMIUM}")
        return 77
    tmp = tempfile.mkdtemp(prefix="strata-dash-")
    procs, servers = [], []
    try:
        srv, port = start_server(binary, ["--metrics", "--api-key", KEY, "--kv-spill", os.path.join(tmp, "spill"),
                                          "--kv-ram", "256K"], tmp, "server")
        procs.append(srv)
        servers.append(("server", srv))

        print("the page and its headers")
        st, hd, body = http(port, "/", key=None)
        check(st == 200, f"GET / without the key: {st}")
        check(hd.get("Content-Type") == "text/html; charset=utf-8", f"Content-Type {hd.get('Content-Type')}")
        csp = hd.get("Content-Security-Policy") or ""
        check("default-src 'self'" in csp and "script-src 'self'" in csp and "unsafe" not in csp, f"CSP {csp}")
        check(b'<script src="/dash.js"' in body, "the page loads /dash.js")
        st, hd, _ = http(port, "/index.html", key=None)
        check(st == 200 and hd.get("Content-Type") == "text/html; charset=utf-8", f"GET /index.html: {st}")
        st, hd, _ = http(port, "/dash.js", key=None)
        check(st == 200 and hd.get("Content-Type", "").startswith("text/javascript"), f"GET /dash.js: {st}")
        st, _, _ = http(port, "/slots", key=None)
        check(st == 401, f"GET /slots without the key: {st}")

        # the long request: the end-of-sequence token barred, so it runs to its max_tokens
        req = json.dumps({"messages": [{"role": "user", "content": "tell me a long story"}], "stream": True,
                          "max_tokens": 1900, "logit_bias": {str(EOS): -100}})
        curl = subprocess.Popen(["curl", "-sN", "-H", "Authorization: Bearer " + KEY, "-H",
                                 "Content-Type: application/json", "-d", req,
                                 f"http://127.0.0.1:{port}/v1/chat/completions"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(curl)

        # /slots every 50 ms from here on, with the time of each answer
        snaps, stop = [], threading.Event()

        def poll():
            while not stop.is_set():
                st, _, b = http(port, "/slots")
                if st == 200:
                    snaps.append((time.monotonic(), json.loads(b)))
                time.sleep(0.05)
        th = threading.Thread(target=poll, daemon=True)
        th.start()
        t_end = time.monotonic() + 60  # a sanitizer build under load is slow to spill
        while time.monotonic() < t_end and not any(
                s["slots"] and "D" in s["slots"][0]["pages"] and "R" in s["slots"][0]["pages"] for _, s in snaps):
            time.sleep(0.05)
        check(any(s["slots"] and "D" in s["slots"][0]["pages"] for _, s in snaps), "/slots shows pages spilled to disk")

        chrome, ws = start_chromium(tmp)
        procs.append(chrome)
        ws.call("Page.enable")
        ws.call("Page.navigate", url=f"http://127.0.0.1:{port}/")
        for _ in range(100):
            if ws.js("document.readyState") == "complete" and ws.js("!!document.getElementById('api-key')"):
                break
            time.sleep(0.05)
        first = ws.js("document.getElementById('status').textContent")
        print(f"  before the key, the page says: {first!r}")
        ws.js("(() => { const k = document.getElementById('api-key'); k.value = '%s';"
              " k.dispatchEvent(new Event('input')); })()" % KEY)

        print("the KV cache view, while the long request runs")
        dom, t_dom = None, 0
        t_end = time.monotonic() + 10
        while time.monotonic() < t_end:
            d = ws.js(DOM_STATE)
            if d["slots"] and d["slots"][0]["D"] and d["slots"][0]["R"] and d["gen"].endswith("tok/s"):
                dom, t_dom = d, time.monotonic()
                break
            time.sleep(0.1)
        check(dom is not None, "the page shows a strip with disk and RAM cells and a tok/s figure")
        if dom is None:
            print("  last DOM:", json.dumps(d))
            return 1
        png = base64.b64decode(ws.call("Page.captureScreenshot", format="png")["data"])
        after = ws.js(DOM_STATE)  # where the strip was when the screenshot was taken (or just after)
        # The page's numbers all come from one /slots answer of its last refresh (at most a second
        # and a fetch before): one of the answers this script saw then must agree with every one
        # of them, within 2 pages (the two fetches were up to 50 ms apart, a page is 16 tokens).
        window = [s for t, s in snaps if t_dom - 1.6 <= t <= t_dom + 0.05]
        check(len(window) >= 5, f"{len(window)} /slots snapshots in the second before")
        sl = dom["slots"][0]

        def shown(s):
            """The page's figures next to one /slots answer's."""
            mine = [x for x in s["slots"] if x["id"] == sl["id"]]
            x = mine[0] if mine else {"pages": ""}
            pairs = [("pool " + k, int(dom["pool"][k]), s["pool"][k])
                     for k in ("pages", "used", "cached", "free", "ram_pages", "hot", "cold")]
            return pairs + [("strip cells", sl["cells"], len(x["pages"])), ("disk cells", sl["D"], x["pages"].count("D")),
                            ("RAM cells", sl["R"], x["pages"].count("R")), ("request id", sl["id"], x.get("id"))]
        best = min(window, key=lambda s: max(abs(a - b) if b is not None else 1e9 for _, a, b in shown(s)))
        for name, a, b in shown(best):
            check(b is not None and abs(a - b) <= 2, f"{name}: the page shows {a}, /slots said {b}")
        lo = window[0]["pool"]["used"], window[-1]["pool"]["used"]
        print(f"  (pool used moved {lo[0]} -> {lo[1]} in that second)")
        # tok/s against the tokens /slots saw generated over the window
        gen = [(t, sum(x["n_generated"] for x in s["slots"])) for t, s in snaps if t_dom - 3 <= t <= t_dom]
        rate = (gen[-1][1] - gen[0][1]) / (gen[-1][0] - gen[0][0]) if len(gen) > 1 and gen[-1][0] > gen[0][0] else 0
        page_rate = float(dom["gen"].split()[0])
        check(rate > 0 and rate / 3 <= page_rate <= rate * 3,
              f"generation: the page shows {dom['gen']}, /slots' n_generated grew {rate:.0f} tok/s")
        check(dom["metrics"] == "on", f"metrics: {dom['metrics']}")
        print(f"  page: pool {dom['pool']}, strip {sl['cells']} cells ({sl['R']} RAM, {sl['D']} disk), {dom['gen']}")

        print("the screenshot")
        img = png_decode(png)
        box = dict(sl["box"])
        for b in (after["slots"][0]["box"],) if after["slots"] else ():
            box["h"] = max(box["h"], b["h"])  # a strip that grew a row between the two reads
        n_ram, n_disk = count_colour(img, box, RAM), count_colour(img, box, DISK)
        n_disk_chat = count_colour(img, dom["chat"], DISK)
        print(f"  {img[0]}x{img[1]}, strip box {box}: {n_ram} RAM pixels, {n_disk} disk pixels")
        # a cell is 10x10 pixels
        check(n_ram >= 100 * min(sl["R"], after["slots"][0]["R"] if after["slots"] else sl["R"]),
              f"RAM-coloured pixels in the strip: {n_ram}")
        check(n_disk >= 100 * sl["D"], f"disk-coloured pixels in the strip: {n_disk} (>= {100 * sl['D']})")
        check(n_disk_chat == 0, f"disk-coloured pixels in the chat box: {n_disk_chat}")

        # the long request may hold the pool's budget until it ends: hang up, which cancels it
        curl.terminate()
        curl.wait()
        print("a chat through the page's form")
        # every change of the reply's text: tokens must arrive in pieces, not all at the end
        ws.js("(() => { window.replyUpdates = 0; new MutationObserver((ms) => { for (const m of ms)"
              " if (m.target.closest && m.target.closest('.msg.assistant')) window.replyUpdates++; })"
              ".observe(document.getElementById('log'), {subtree: true, childList: true, characterData: true}); })()")
        ws.js("(() => { document.getElementById('max-tokens').value = '12';"
              " document.getElementById('prompt').value = 'hello there';"
              " document.getElementById('send').click(); })()")
        reply = None
        t_end = time.monotonic() + 10
        while time.monotonic() < t_end:
            reply = ws.js("(() => { const m = [...document.querySelectorAll('#log .msg')];"
                          " return m.map((e) => ({cls: e.className, finish: e.dataset.finish,"
                          " text: e.querySelector('.text').textContent})); })()")
            if len(reply) >= 2 and reply[-1].get("finish") is not None:
                break
            time.sleep(0.1)
        check(len(reply) == 2 and reply[0]["cls"] == "msg user" and reply[0]["text"] == "hello there",
              f"the question in the log: {reply[:1]}")
        ans = reply[-1] if reply else {}
        check(ans.get("cls") == "msg assistant" and ans.get("finish") in ("length", "stop") and ans.get("text"),
              f"a streamed reply: {json.dumps(ans)[:200]}")
        updates = ws.js("window.replyUpdates")
        check(updates >= 2, f"the reply's text changed {updates} times while it streamed")

        print("a second turn: the page sends the conversation, whose first turn is in the prefix cache")
        ws.js("(() => { document.getElementById('prompt').value = 'and again';"
              " document.getElementById('send').click(); })()")
        t_end = time.monotonic() + 10
        while time.monotonic() < t_end:
            reply = ws.js("[...document.querySelectorAll('#log .msg')].map((e) => e.dataset.finish || null)")
            if len(reply) >= 4 and reply[3] is not None:
                break
            time.sleep(0.1)
        check(len(reply) == 4 and reply[3] in ("length", "stop"), f"the second reply finished: {reply}")
        # the page's hit rate against the counters, once it refreshed after the second turn
        _, _, mb = http(port, "/metrics")
        m = {l.split()[0]: float(l.split()[1]) for l in mb.decode().split("\n") if l and l[0] != "#"}
        want = "%.1f%%" % (100 * m["strata_prompt_tokens_cached_total"] / m["strata_prompt_tokens_total"])
        hit = None
        t_end = time.monotonic() + 3
        while time.monotonic() < t_end and hit != want:
            hit = ws.js("document.getElementById('hit-rate').textContent")
            time.sleep(0.1)
        check(m["strata_prompt_tokens_cached_total"] > 0, f"cached prompt tokens: {m['strata_prompt_tokens_cached_total']:.0f}")
        check(hit == want, f"hit rate: the page shows {hit}, /metrics says {want}")

        stop.set()
        th.join()
        srv2, port2 = start_server(binary, [], tmp, "server2")
        procs.append(srv2)
        servers.append(("server2", srv2))
        print("a server without --metrics")
        st, _, _ = http(port2, "/metrics", key=None)
        check(st == 501, f"GET /metrics: {st}")
        ws.call("Page.navigate", url=f"http://127.0.0.1:{port2}/")
        off = None
        t_end = time.monotonic() + 5
        while time.monotonic() < t_end:
            try:
                off = ws.js("document.getElementById('metrics-state').textContent")
            except RuntimeError:
                off = None  # the old page went away mid-call
            if off == "metrics off":
                break
            time.sleep(0.1)
        check(off == "metrics off", f"metrics state: {off!r}")
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
        # the servers stop cleanly on SIGTERM (under ASan: no leak, no error report)
        for name, p in servers:
            log = open(os.path.join(tmp, name + ".log")).read()
            check(p.returncode == 0 and "ERROR: " not in log, f"{name} exited {p.returncode}")
            if p.returncode != 0:
                print(log[-3000:])
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
