"""serve-sim's batch endpoints: OpenAI's Batch API (``/files``, ``/batches``) and Anthropic's Message Batches
(``/v1/messages/batches``), answered by the simulated panel.

A batch ends ``batch_delay_s`` seconds after it is created (default 0.5), whether or not anyone asks: its lines
are answered when it is next looked at, as the synchronous routes answer them (faults included), and each
answered line's usage goes to the ledger marked ``"batch": true`` (billed at the batch price; lines that errored or
expired are not billed). Faults, rates per line: ``batch_error`` (the line fails: HTTP 500 in OpenAI's error file,
``errored`` on Anthropic's), ``batch_expire`` (the line expires: OpenAI's batch ends ``expired`` with the line in its
error file; Anthropic's ``expired``); ``batch_line_ms`` streams the results that slowly (a line at a time);
``batch_invalid`` (a rate per OpenAI batch) fails a batch's validation as a whole (status ``failed`` with its
``errors``; nothing run or billed); ``batch_cut_after=N`` drops the connection after N lines of each results file,
the first time it is read. Every batch created is written to the ledger too (``{"batch": id,
"custom_ids": [...]}``), the server's own record of what it was asked to run.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime


class _Batches:
    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, dict] = {}
        self.order: list[str] = []


def add_batch_routes(app, panel, refused, answer) -> None:
    """Add the batch routes to serve-sim's application (``refused(request)``: the key check; ``answer(panel,
    protocol, body, batch=True)``: one line answered as the synchronous routes answer it)."""
    from aiohttp import web

    state = _Batches()
    faults = panel.faults

    def create(protocol: str, lines: list[tuple[str, dict]], metadata: dict | None) -> dict:
        n = len(state.order) + 1
        bid = f"batch_sim{n:05d}" if protocol == "openai" else f"msgbatch_sim{n:05d}"
        batch = {"id": bid, "protocol": protocol, "lines": lines, "created": time.time(), "metadata": metadata or {},
                 "ends": time.time() + faults.get("batch_delay_s", 0.5), "results": None,
                 "invalid": protocol == "openai" and panel._rng.random() < faults.get("batch_invalid", 0.0)}
        state.batches[bid] = batch
        state.order.append(bid)
        if panel.ledger:
            with open(panel.ledger, "a", encoding="utf-8") as out:
                out.write(json.dumps({"batch": bid, "custom_ids": [c for c, _ in lines]}) + "\n")
        return batch

    def process(batch: dict) -> None:
        """Answer every line of a batch whose time has come (once)."""
        if batch["results"] is not None or time.time() < batch["ends"]:
            return
        if batch["invalid"]:  # the file did not validate: no line runs, none is billed
            batch["results"] = ([], [])
            return
        rng = panel._rng
        ok, failed = [], []
        for cid, body in batch["lines"]:
            if rng.random() < faults.get("batch_expire", 0.0):
                failed.append((cid, "expired", None))
                continue
            if rng.random() < faults.get("batch_error", 0.0):
                failed.append((cid, "errored", {"message": "internal error"}))
                continue
            status, _, out = answer(panel, batch["protocol"], body, batch=True)
            if status == 200:
                ok.append((cid, out))
            else:
                failed.append((cid, "errored", out.get("error") or {"message": f"HTTP {status}"}))
        batch["results"] = (ok, failed)

    def openai_view(batch: dict) -> dict:
        process(batch)
        view = {"id": batch["id"], "object": "batch", "endpoint": "/v1/chat/completions",
                "input_file_id": batch.get("file"), "completion_window": "24h", "created_at": int(batch["created"]),
                "metadata": batch["metadata"], "output_file_id": None, "error_file_id": None,
                "request_counts": {"total": len(batch["lines"]), "completed": 0, "failed": 0}}
        if batch["results"] is None:
            return {**view, "status": "in_progress"}
        if batch["invalid"]:
            return {**view, "status": "failed", "errors": {"object": "list", "data": [
                {"code": "invalid_request", "line": 1, "message": "The model 'x' does not support the batch API."}]}}
        ok, failed = batch["results"]
        expired = any(kind == "expired" for _, kind, _ in failed)
        return {**view, "status": "expired" if expired else "completed",
                "output_file_id": f"file-out-{batch['id']}" if ok else None,
                "error_file_id": f"file-err-{batch['id']}" if failed else None,
                "request_counts": {"total": len(batch["lines"]), "completed": len(ok), "failed": len(failed)}}

    def anthropic_view(batch: dict, origin: str) -> dict:
        process(batch)
        n = len(batch["lines"])
        view = {"id": batch["id"], "type": "message_batch", "results_url": None,
                "created_at": datetime.fromtimestamp(batch["created"], UTC).isoformat().replace("+00:00", "Z")}
        if batch["results"] is None:
            return {**view, "processing_status": "in_progress", "request_counts": {
                "processing": n, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}}
        ok, failed = batch["results"]
        url = f"{origin}/v1/messages/batches/{batch['id']}/results"
        return {**view, "processing_status": "ended", "results_url": url,
                "request_counts": {"processing": 0, "succeeded": len(ok), "canceled": 0,
                                   "errored": sum(k == "errored" for _, k, _ in failed),
                                   "expired": sum(k == "expired" for _, k, _ in failed)}}

    def result_lines(batch: dict, which: str) -> list[str]:
        ok, failed = batch["results"]
        if batch["protocol"] == "anthropic":
            lines = [{"custom_id": c, "result": {"type": "succeeded", "message": out}} for c, out in ok]
            lines += [{"custom_id": c, "result": {"type": kind, **({"error": {"type": "error", "error": e}}
                                                                   if e else {})}} for c, kind, e in failed]
        elif which == "out":
            lines = [{"id": f"batch_req_{k}", "custom_id": c, "response": {"status_code": 200, "body": out},
                      "error": None} for k, (c, out) in enumerate(ok)]
        else:
            lines = [{"id": f"batch_req_e{k}", "custom_id": c,
                      "response": None if kind == "expired" else {"status_code": 500, "body": {"error": e}},
                      "error": {"code": "batch_expired", "message": "This request could not be executed before the "
                                "completion window expired."} if kind == "expired" else None}
                     for k, (c, kind, e) in enumerate(failed)]
        return [json.dumps(line) + "\n" for line in lines]

    cut: set[str] = set()

    async def stream(request, lines: list[str]) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "application/jsonl"})
        await resp.prepare(request)
        pause = faults.get("batch_line_ms", 0.0) / 1000.0
        drop = int(faults.get("batch_cut_after", 0))
        for k, line in enumerate(lines):
            if drop and k == drop and request.path not in cut:  # the connection dropped, once per file
                cut.add(request.path)
                request.transport.close()
                return resp
            await resp.write(line.encode("utf-8"))
            if pause:
                await asyncio.sleep(pause)
        await resp.write_eof()
        return resp

    def missing(what: str) -> web.Response:
        return web.json_response({"error": {"message": f"No such {what}.", "type": "invalid_request_error"}},
                                 status=404)

    async def upload(request):
        if (no := refused(request)) is not None:
            return no
        form = await request.post()
        file = form.get("file")
        if form.get("purpose") != "batch" or file is None:
            return web.json_response({"error": {"message": "purpose must be 'batch' with a file"}}, status=400)
        fid = f"file-in-{len(state.files) + 1:05d}"
        state.files[fid] = file.file.read()
        return web.json_response({"id": fid, "object": "file", "bytes": len(state.files[fid]), "purpose": "batch"})

    async def openai_create(request):
        if (no := refused(request)) is not None:
            return no
        body = await request.json()
        raw = state.files.get(body.get("input_file_id"))
        if raw is None:
            return missing("file")
        lines = []
        for text in raw.decode("utf-8").splitlines():
            if text.strip():
                line = json.loads(text)
                lines.append((line["custom_id"], line["body"]))
        if len({c for c, _ in lines}) != len(lines):
            return web.json_response({"error": {"message": "custom_id values must be unique"}}, status=400)
        batch = create("openai", lines, body.get("metadata"))
        batch["file"] = body.get("input_file_id")
        return web.json_response(openai_view(batch))

    async def openai_get(request):
        if (no := refused(request)) is not None:
            return no
        batch = state.batches.get(request.match_info["id"])
        return web.json_response(openai_view(batch)) if batch and batch["protocol"] == "openai" else missing("batch")

    async def openai_list(request):
        if (no := refused(request)) is not None:
            return no
        ids = [b for b in reversed(state.order) if state.batches[b]["protocol"] == "openai"]  # newest first
        after = request.query.get("after")
        if after in ids:
            ids = ids[ids.index(after) + 1:]
        limit = int(request.query.get("limit", 20))
        page = ids[:limit]
        return web.json_response({"object": "list", "data": [openai_view(state.batches[b]) for b in page],
                                  "has_more": len(ids) > limit})

    async def openai_content(request):
        if (no := refused(request)) is not None:
            return no
        fid = request.match_info["id"]
        for prefix, which in (("file-out-", "out"), ("file-err-", "err")):
            if fid.startswith(prefix) and fid[len(prefix):] in state.batches:
                batch = state.batches[fid[len(prefix):]]
                if batch["results"] is not None:
                    return await stream(request, result_lines(batch, which))
        return missing("file")

    async def anthropic_create(request):
        if (no := refused(request)) is not None:
            return no
        body = await request.json()
        lines = [(r["custom_id"], r["params"]) for r in body.get("requests") or []]
        if not lines or len({c for c, _ in lines}) != len(lines):
            return web.json_response({"error": {"message": "requests must be given, with unique custom_id values"}},
                                     status=400)
        return web.json_response(anthropic_view(create("anthropic", lines, None), _origin(request)))

    async def anthropic_get(request):
        if (no := refused(request)) is not None:
            return no
        batch = state.batches.get(request.match_info["id"])
        if not batch or batch["protocol"] != "anthropic":
            return missing("batch")
        return web.json_response(anthropic_view(batch, _origin(request)))

    async def anthropic_list(request):
        if (no := refused(request)) is not None:
            return no
        ids = [b for b in reversed(state.order) if state.batches[b]["protocol"] == "anthropic"]
        limit = int(request.query.get("limit", 20))
        return web.json_response({"data": [anthropic_view(state.batches[b], _origin(request)) for b in ids[:limit]],
                                  "has_more": len(ids) > limit})

    async def anthropic_results(request):
        if (no := refused(request)) is not None:
            return no
        batch = state.batches.get(request.match_info["id"])
        if not batch or batch["results"] is None:
            return missing("batch results")
        return await stream(request, result_lines(batch, "all"))

    for prefix in ("/v1", ""):
        app.router.add_post(f"{prefix}/files", upload)
        app.router.add_post(f"{prefix}/batches", openai_create)
        app.router.add_get(f"{prefix}/batches", openai_list)
        app.router.add_get(f"{prefix}/batches/{{id}}", openai_get)
        app.router.add_get(f"{prefix}/files/{{id}}/content", openai_content)
    app.router.add_post("/v1/messages/batches", anthropic_create)
    app.router.add_get("/v1/messages/batches", anthropic_list)
    app.router.add_get("/v1/messages/batches/{id}", anthropic_get)
    app.router.add_get("/v1/messages/batches/{id}/results", anthropic_results)


def _origin(request) -> str:
    return f"{request.scheme}://{request.host}"
