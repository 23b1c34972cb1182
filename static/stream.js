// Following the journal live: a snapshot, then `/v1/events?after=<seq>` read with fetch.
//
// fetch rather than EventSource because the page must own reconnection: EventSource retries on its
// own schedule, hides HTTP statuses and cannot be told to re-snapshot. Here every reconnect resumes
// from the last event the page applied, with backoff, and `event: reset` starts over from a snapshot.
// A refusal (401: no or stale login; 403: this token may not read everything) cannot get better by
// retrying: the follower stops and says so, and starts again when told to (after a login).

import { ApiError } from './api.js';

const FIRST_RETRY_MS = 250;
const MAX_RETRY_MS = 8000;
// The server sends `: ping` every 15 s by default; three missed in a row means a dead connection
// that the network did not report (a sleeping laptop, a dropped Wi-Fi).
const SILENCE_LIMIT_MS = 45000;

/** Whether an error is the server refusing these credentials, rather than a passing failure. */
function isDenied(error) {
  return error instanceof ApiError && (error.status === 401 || error.status === 403);
}

/**
 * `start()` calls `snapshot(isCurrent)` (which loads the listings and returns their `journal_seq`;
 * it must apply nothing once `isCurrent()` is false), then streams the journal from there, calling
 * `onEvent(event, seq)` once per event in order. `onState(state, detail)` reports `loading` |
 * `connecting` | `live` | `offline` (with `detail.retryInMs`). When the snapshot or the stream is
 * refused (401, 403: see isDenied) the follower stops and calls `onDenied(error)`.
 */
export class JournalFollower {
  constructor({ snapshot, onEvent, onState, onDenied }) {
    this.snapshot = snapshot;
    this.onEvent = onEvent;
    this.onState = onState;
    this.onDenied = onDenied;
    this.cursor = null; // the seq of the last applied event; null: a snapshot is needed first
    this.failures = 0;
    this.wakeUp = null;
    this.stream = null; // the AbortController of the stream being read
    // Each start() begins a new run; a run whose number is no longer current ends at its next step.
    this.runs = 0;
    // A network that comes back is worth trying at once instead of waiting out the backoff.
    window.addEventListener('online', () => this.wakeUp?.());
  }

  /** Follows from a fresh snapshot; a run still going is stopped first. */
  start() {
    this.stop();
    this.cursor = null;
    this.failures = 0;
    this.run(this.runs);
  }

  /** Stops following: closes the stream, and no reconnect follows. */
  stop() {
    this.runs += 1;
    this.stream?.abort();
    this.wakeUp?.();
  }

  async run(run) {
    const current = () => run === this.runs;
    while (current()) {
      this.resetAsked = false;
      try {
        if (this.cursor === null) {
          this.onState('loading');
          const seq = await this.snapshot(current);
          if (!current()) return;
          this.cursor = seq;
        }
        this.onState('connecting');
        await this.follow(current);
      } catch (error) {
        if (!current()) return;
        if (isDenied(error)) {
          // Retrying would only be refused again, as often as the backoff allows: stop here.
          this.stop();
          this.onDenied(error);
          return;
        }
        console.warn('gatehouse: journal stream interrupted:', error);
      }
      if (!current()) return;
      // After a reset the snapshot is due at once; anything else waits, longer after each failure.
      if (!this.resetAsked) await this.pause(this.nextDelay());
    }
  }

  nextDelay() {
    const base = Math.min(MAX_RETRY_MS, FIRST_RETRY_MS * 2 ** this.failures);
    this.failures += 1;
    // Jitter, so a restarted server is not hit by every open tab in the same millisecond.
    return Math.round(base * (0.8 + Math.random() * 0.4));
  }

  pause(ms) {
    this.onState('offline', { retryInMs: ms });
    let done;
    return new Promise((resolve) => {
      const timer = setTimeout(() => done(), ms);
      done = () => {
        clearTimeout(timer);
        resolve();
      };
      this.wakeUp = done;
    }).finally(() => {
      // Only our own: a newer run may have started pausing meanwhile.
      if (this.wakeUp === done) this.wakeUp = null;
    });
  }

  /** Reads one stream until it ends, fails, goes silent or asks for a reset. */
  async follow(current) {
    const abort = new AbortController();
    this.stream = abort;
    let heardAt = Date.now();
    // Also bounds a connect that never gets an answer, not only a stream that stops talking.
    const watchdog = setInterval(() => {
      if (Date.now() - heardAt > SILENCE_LIMIT_MS) abort.abort();
    }, 5000);
    try {
      const response = await fetch(`/v1/events?after=${this.cursor}`, {
        headers: { Accept: 'text/event-stream' },
        cache: 'no-store',
        signal: abort.signal,
      });
      if (!response.ok || !response.body) {
        // A cursor the server rejects cannot get better by retrying it: start over from a snapshot.
        if (response.status === 400) this.cursor = null;
        const body = await response.json().catch(() => null);
        throw new ApiError(response.status, body?.error ?? { message: `the event stream answered ${response.status}` });
      }
      if (!current()) return;
      this.failures = 0;
      this.onState('live');
      const parser = new SseParser((frame) => this.dispatch(frame));
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      while (this.cursor !== null && current()) {
        const { value, done } = await reader.read();
        if (done) return;
        heardAt = Date.now();
        parser.push(value);
      }
    } finally {
      clearInterval(watchdog);
      abort.abort(); // also closes the connection after a reset
      if (this.stream === abort) this.stream = null;
    }
  }

  dispatch({ type, id, data }) {
    if (type === 'reset') {
      // The server's journal is not the one our cursor came from: what we show may be stale.
      this.cursor = null;
      this.resetAsked = true;
      return;
    }
    if (type !== 'enduring' || this.cursor === null) return;
    const seq = Number(id);
    if (!Number.isSafeInteger(seq) || seq <= this.cursor) return; // never apply an event twice
    try {
      this.onEvent(JSON.parse(data).event, seq);
    } catch (error) {
      // One event the page cannot show must not stall every later one.
      console.error('gatehouse: could not apply journal event', seq, error);
    }
    this.cursor = seq;
  }
}

/** The Server-Sent Events wire format: `field: value` lines, frames ended by a blank line. */
export class SseParser {
  constructor(onFrame) {
    this.onFrame = onFrame;
    this.rest = '';
    this.reset();
  }

  reset() {
    this.type = '';
    this.id = null;
    this.data = [];
  }

  push(text) {
    const lines = (this.rest + text).split(/\r\n|\n/);
    this.rest = lines.pop(); // an unfinished line waits for the next chunk
    for (const line of lines) this.line(line);
  }

  line(line) {
    if (line === '') {
      if (this.data.length > 0) this.onFrame({ type: this.type || 'message', id: this.id, data: this.data.join('\n') });
      this.reset();
      return;
    }
    if (line.startsWith(':')) return; // a comment: `: ping`
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'event') this.type = value;
    else if (field === 'data') this.data.push(value);
    else if (field === 'id') this.id = value;
    // `retry:` is ignored on purpose: the follower keeps its own backoff.
  }
}
