// The live event stream: Server-Sent Events from GET /api/v1/events?since=C
// (internal/http/events). Every log event carries a cursor ("REV" or "REV:N",
// opaque) as its SSE id, so a reconnect resumes where the last one stopped:
// EventSource sends Last-Event-ID by itself, and after a hard failure we
// reconnect with since=<last id>. When the server cannot resume it sends
// "resync"; the page then reloads what it shows over REST.
import { createParser } from "eventsource-parser";

import { authHeaders, token } from "./api";
import type { StreamEvent } from "./types";

export type StreamState = "connecting" | "live" | "reconnecting" | "down";

export interface StreamOptions {
  onEvent: (e: StreamEvent) => void;
  onState: (s: StreamState, detail: string) => void;
}

/** Event names the server may use for `event:` lines (besides the default "message"). */
// (internal/http/events sends none today; listening costs nothing.)
const NAMED = ["task", "dag", "dag_deleted", "metrics", "leader", "system", "resync", "gap"];

export class EventStream {
  private es: EventSource | null = null;
  private ctl: AbortController | null = null;
  private retryTimer = 0;
  private backoff = 500;
  private stopped = false;
  /** The cursor of the last event received (or the revision we started from). */
  cursor = "";
  /** The highest revision seen. */
  lastRev = 0;
  state: StreamState = "connecting";
  received = 0;

  constructor(private readonly opts: StreamOptions) {}

  start(sinceRev: number): void {
    this.lastRev = Math.max(this.lastRev, sinceRev);
    this.cursor = String(sinceRev);
    this.stopped = false;
    this.connect();
  }

  stop(): void {
    this.stopped = true;
    this.close();
    clearTimeout(this.retryTimer);
  }

  /** Drops the connection and opens a new one from the last revision seen. */
  restart(): void {
    this.close();
    clearTimeout(this.retryTimer);
    this.connect();
  }

  private url(): string {
    return `/api/v1/events?since=${encodeURIComponent(this.cursor)}`;
  }

  private setState(s: StreamState, detail = ""): void {
    this.state = s;
    this.opts.onState(s, detail);
  }

  private close(): void {
    if (this.es) {
      this.es.close();
      this.es = null;
    }
    if (this.ctl) {
      this.ctl.abort();
      this.ctl = null;
    }
  }

  private connect(): void {
    if (this.stopped) return;
    this.setState(this.received > 0 ? "reconnecting" : "connecting", `since ${this.cursor}`);
    if (token()) this.connectFetch();
    else this.connectEventSource();
  }

  private scheduleRetry(why: string): void {
    this.close();
    if (this.stopped) return;
    this.setState("down", why);
    clearTimeout(this.retryTimer);
    this.retryTimer = window.setTimeout(() => this.connect(), this.backoff);
    this.backoff = Math.min(this.backoff * 2, 5000);
  }

  private deliver(data: string, id: string, name: string): void {
    if (!data) return;
    let ev: StreamEvent;
    try {
      ev = JSON.parse(data) as StreamEvent;
    } catch {
      return;
    }
    if (!ev.type && name && name !== "message") ev.type = name;
    const cursor = id || (typeof ev.id === "string" ? ev.id : "");
    if (cursor) this.cursor = cursor;
    if (typeof ev.rev === "number" && ev.rev > this.lastRev) this.lastRev = ev.rev;
    this.received++;
    this.opts.onEvent(ev);
  }

  private connectEventSource(): void {
    const es = new EventSource(this.url());
    this.es = es;
    es.onopen = () => {
      this.backoff = 500;
      this.setState("live", "");
    };
    const handler = (m: MessageEvent) => this.deliver(String(m.data), m.lastEventId, m.type);
    es.onmessage = handler;
    for (const n of NAMED) es.addEventListener(n, handler as EventListener);
    es.onerror = () => {
      if (es.readyState === EventSource.CLOSED) {
        // A hard failure (an HTTP error, or no stream endpoint): EventSource
        // does not retry those; we do, from the last revision.
        this.scheduleRetry("the stream closed");
      } else {
        this.setState("reconnecting", `resuming after ${this.cursor}`);
      }
    };
  }

  /** With a bearer token EventSource cannot send the header: read the stream with fetch. */
  private async connectFetch(): Promise<void> {
    const ctl = new AbortController();
    this.ctl = ctl;
    try {
      const headers = authHeaders({ Accept: "text/event-stream" });
      if (this.cursor) headers["Last-Event-ID"] = this.cursor;
      const resp = await fetch(this.url(), { headers, signal: ctl.signal, cache: "no-store" });
      if (!resp.ok || !resp.body) {
        this.scheduleRetry(`the stream answered ${resp.status}`);
        return;
      }
      this.backoff = 500;
      this.setState("live", "");
      // The SSE framing (fields, multi-line data, the last-event-id
      // buffer) is eventsource-parser's; a reconnect starts a new parser.
      let lastID = "";
      const parser = createParser({
        onEvent: (m) => {
          if (m.id !== undefined) lastID = m.id;
          this.deliver(m.data, lastID, m.event ?? "");
        },
      });
      const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        parser.feed(value);
      }
      this.scheduleRetry("the stream ended");
    } catch (e) {
      if (ctl.signal.aborted) return;
      this.scheduleRetry((e as Error).message);
    }
  }
}
