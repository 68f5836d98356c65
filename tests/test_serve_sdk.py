# test_serve_sdk.py — drives a running `tracemill serve` with the real Sentry
# Python SDK (Debian's python3-sentry-sdk), run by test_serve_sdk.c as
#   python3 test_serve_sdk.py DSN STORE_DIR TRACEMILL
# It sends what users' programs send (an error, a message with an attachment,
# a transaction, a session, a client report, and a profile_chunk sampled from
# CPU-busy threads as sentry-python 2.x's continuous profiler builds it, sent
# through this SDK's transport), checks every answer is Relay's, then reads
# the store back with `tracemill store` and SQLite. Exit 77 when the SDK is
# absent, 1 with the reason on the first difference.
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
import uuid

try:
    import sentry_sdk
    import urllib3
    from sentry_sdk.envelope import Envelope, Item, PayloadRef
except ImportError:
    print("skipped: the Sentry SDK is not installed (apt-get install python3-sentry-sdk)")
    sys.exit(77)

DSN, STORE, TRACEMILL = sys.argv[1:4]
answers = []  # (path, status, body) of every request the SDK made

send_request = urllib3.PoolManager.request


def recording_request(self, method, url, *args, **kwargs):
    response = send_request(self, method, url, *args, **kwargs)
    answers.append((urllib3.util.parse_url(url).path, response.status, response.data.decode()))
    return response


urllib3.PoolManager.request = recording_request


def fail(why):
    print("FAIL:", why)
    for a in answers:
        print("  answer:", a)
    sys.exit(1)


sentry_sdk.init(dsn=DSN, release="shop@1.2.3", environment="staging", traces_sample_rate=1.0)
client = sentry_sdk.Hub.current.client

# errors, an attachment, a transaction with a span, a session
try:
    1 / 0
except ZeroDivisionError:
    error_id = sentry_sdk.capture_exception()
message_id = sentry_sdk.capture_message("checkout failed")
with sentry_sdk.push_scope() as scope:
    scope.add_attachment(bytes=b"order 42: 3 items\n", filename="order.txt")
    attached_id = sentry_sdk.capture_message("with an attachment")
with sentry_sdk.start_transaction(op="task", name="checkout") as transaction:
    with transaction.start_child(op="db", description="select"):
        pass
sentry_sdk.Hub.current.start_session(session_mode="application")
sentry_sdk.Hub.current.end_session()
client.transport.record_lost_event("queue_overflow", data_category="transaction")
client.transport._flush_client_reports(force=True)


# a profile_chunk as sentry-python 2.x's continuous profiler makes it:
# sys._current_frames() sampled while three threads burn CPU
def burn(stop):
    x = 0
    while not stop.is_set():
        x = (x * 31 + 7) % 1000003


stop = threading.Event()
workers = [threading.Thread(target=burn, args=(stop,), name="burner-%d" % i) for i in range(3)]
for w in workers:
    w.start()
frames, stacks, samples, frame_index, stack_index = [], [], [], {}, {}
wall_start, mono_start = time.time(), time.perf_counter()
for _ in range(40):
    timestamp = wall_start + (time.perf_counter() - mono_start)
    for tid, frame in sys._current_frames().items():
        stack = []
        while frame is not None:
            code = frame.f_code
            key = (code.co_filename, frame.f_lineno, code.co_name)
            if key not in frame_index:
                frame_index[key] = len(frames)
                frames.append({"abs_path": key[0], "filename": os.path.basename(key[0]), "function": key[2],
                               "lineno": key[1], "module": frame.f_globals.get("__name__"), "in_app": True})
            stack.append(frame_index[key])
            frame = frame.f_back
        if tuple(stack) not in stack_index:
            stack_index[tuple(stack)] = len(stacks)
            stacks.append(stack)
        samples.append({"timestamp": timestamp, "thread_id": str(tid), "stack_id": stack_index[tuple(stack)]})
    time.sleep(0.005)
stop.set()
for w in workers:
    w.join()
chunk = {"chunk_id": uuid.uuid4().hex, "profiler_id": uuid.uuid4().hex, "platform": "python", "version": "2",
         "client_sdk": {"name": "sentry.python", "version": "2.30.0"}, "release": "shop@1.2.3",
         "environment": "staging",
         "profile": {"frames": frames, "stacks": stacks, "samples": samples,
                     "thread_metadata": {str(t.ident): {"name": t.name}
                                         for t in threading.enumerate() + workers}}}
envelope = Envelope()
envelope.add_item(Item(payload=PayloadRef(json=chunk), type="profile_chunk", headers={"platform": "python"}))
client.transport.capture_envelope(envelope)
sentry_sdk.flush(timeout=60)  # a loaded machine (CI, a sanitizer build) answers slowly

# every answer is Relay's: 200 with the event's id, {} for an envelope without one
if len(answers) < 7:
    fail("expected at least 7 requests, got %d" % len(answers))
for path, status, body in answers:
    if status != 200:
        fail("%s answered %d" % (path, status))
ids = [json.loads(body).get("id") for _, _, body in answers]
for want in (error_id, message_id, attached_id):
    if want not in ids:
        fail("no answer names event %s" % want)

# the chunk is stored, and `store get` gives it back whole
listing = subprocess.run([TRACEMILL, "store", "ls", "--store", STORE], capture_output=True, text=True, check=True)
if chunk["chunk_id"] not in listing.stdout:
    fail("store ls lacks the chunk: " + listing.stdout)
got = json.loads(subprocess.run([TRACEMILL, "store", "get", chunk["chunk_id"], "--store", STORE],
                                capture_output=True, text=True, check=True).stdout)
for key in ("chunk_id", "profiler_id", "platform", "version", "release", "environment", "client_sdk"):
    if got.get(key) != chunk[key]:
        fail("%s: stored %r, sent %r" % (key, got.get(key), chunk[key]))
for key in ("frames", "stacks", "samples"):
    if got["profile"][key] != chunk["profile"][key]:
        fail("profile.%s differs from what was sent" % key)
sampled_threads = {s["thread_id"] for s in samples}
if set(got["profile"]["thread_metadata"]) != sampled_threads:
    fail("thread_metadata %s, sampled threads %s"
         % (sorted(got["profile"]["thread_metadata"]), sorted(sampled_threads)))
names = {m["name"] for m in got["profile"]["thread_metadata"].values()}
if not {"burner-0", "burner-1", "burner-2", "MainThread"} <= names:
    fail("thread names lost: %s" % sorted(names))
first, last = samples[0]["timestamp"], samples[-1]["timestamp"]
if not (abs(first - wall_start) < 5 and last >= first and abs(last - time.time()) < 60):
    fail("sample timestamps implausible against the wall clock")

# what was not kept has Relay's outcomes: error, error, error + attachment bytes and item,
# transaction, session, and the SDK's own report of a dropped transaction
db = sqlite3.connect("file:%s/tracemill.db?mode=ro" % STORE, uri=True)
outcomes = [json.loads(m) for (m,) in db.execute("select message from outcomes order by id")]
counted = sorted((o["outcome"], o["reason"], o["category"], o["quantity"]) for o in outcomes)
want = sorted([(3, "unsupported_item_type", 1, 1)] * 3 + [
    (3, "unsupported_item_type", 4, len(b"order 42: 3 items\n")), (3, "unsupported_item_type", 22, 1),
    (3, "unsupported_item_type", 2, 1), (3, "unsupported_item_type", 5, 1),
    (5, "queue_overflow", 2, 1)])
if counted != want:
    fail("outcomes %s, expected %s" % (counted, want))
print("ok: %d requests, chunk %s with %d samples" % (len(answers), chunk["chunk_id"], len(samples)))
