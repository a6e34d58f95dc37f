/**
 * The calls of one cell as the gate recorded them, and what the table does with them (pure: no DOM).
 *
 * Everything here comes from a notebook and ultimately from the sandbox: it is hostile. Values are
 * read defensively (a field of the wrong type becomes empty) and only ever shown as text.
 */

export const CALLS_MIME = 'application/vnd.cellgate.calls+json';

/** One call record (the shape `CallRecord.as_metadata` writes), every field optional and checked. */
export interface ICall {
  seq: number | null;
  tool: string;
  args: unknown;
  argsSha256: string;
  decision: string;
  rule: string;
  approver: string;
  approvalAnswered: string;
  approvalReason: string;
  ok: boolean;
  outcome: string;
  errorKind: string;
  errorMessage: string;
  result: unknown;
  hasResult: boolean;
  resultPreview: string;
  resultBlob: string;
  resultSha256: string;
  resultBytes: number | null;
  started: string;
  durationMs: number | null;
  claimedLine: number | null;
  claimedSource: string;
}

export type SortKey = 'seq' | 'tool' | 'decision' | 'outcome' | 'started' | 'duration';

function text(value: unknown): string {
  return typeof value === 'string' ? value : '';
}

function number(value: unknown): number | null {
  return typeof value === 'number' && Number.isFinite(value) ? value : null;
}

function object(value: unknown): Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value)
    ? (value as Record<string, unknown>)
    : {};
}

/** The outcome a reviewer reads: `ok`, the error's kind (`timeout`, `tool_error`, ...) or `not run`. */
export function outcomeOf(ok: boolean, decision: string, errorKind: string): string {
  if (ok) {
    return 'ok';
  }
  if (errorKind) {
    return errorKind;
  }
  return ['allow', 'approved'].includes(decision) ? 'error' : 'not run';
}

/** The decision a reviewer reads, in the words of `cellgate show`: a call refused before any rule (its error kind
 * `invalid` or `not_found`) reads `invalid` or `not-found`, whatever an older record's decision field says. */
export function decisionOf(recorded: string, errorKind: string): string {
  if (errorKind === 'invalid') {
    return 'invalid';
  }
  if (errorKind === 'not_found') {
    return 'not-found';
  }
  return recorded || '?';
}

export function parseCall(raw: unknown): ICall {
  const data = object(raw);
  const approval = object(data.approval);
  const error = object(data.error);
  const claimed = object(data.claimed);
  const ok = data.ok === true;
  const errorKind = text(error.kind) || text(error.type);
  const decision = ok ? text(data.decision) || '?' : decisionOf(text(data.decision), errorKind);
  return {
    seq: number(data.seq),
    tool: text(data.tool) || '?',
    args: data.args,
    argsSha256: text(data.args_sha256),
    decision,
    rule: text(data.rule),
    approver: text(approval.approver),
    approvalAnswered: text(approval.answered),
    approvalReason: text(approval.reason),
    ok,
    outcome: outcomeOf(ok, decision, errorKind),
    errorKind,
    errorMessage: text(error.message) || (ok ? '' : text(data.error)),
    result: data.result,
    hasResult: Object.prototype.hasOwnProperty.call(data, 'result'),
    resultPreview: text(data.result_preview),
    resultBlob: text(data.result_blob),
    resultSha256: text(data.result_sha256),
    resultBytes: number(data.result_bytes),
    started: text(data.started),
    durationMs: number(data.duration_ms),
    claimedLine: number(claimed.line),
    claimedSource: text(claimed.source_line)
  };
}

/** The calls of a bundle: `{"calls": [...]}` (the host's bundle) or a bare list. */
export function parseBundle(data: unknown): ICall[] {
  const list = Array.isArray(data) ? data : object(data).calls;
  return Array.isArray(list) ? list.map(parseCall) : [];
}

/** JSON for display (indented), or a note when a value cannot be shown as JSON. */
export function pretty(value: unknown): string {
  try {
    const shown = JSON.stringify(value, null, 2);
    return shown === undefined ? String(value) : shown;
  } catch {
    return '(not JSON)';
  }
}

/** One line of a value, cut to `limit` characters. */
export function oneLine(value: unknown, limit = 80): string {
  let shown: string;
  try {
    shown = JSON.stringify(value) ?? String(value);
  } catch {
    shown = '(not JSON)';
  }
  return shown.length > limit ? shown.slice(0, limit - 1) + '…' : shown;
}

/** Whether a call matches the filter: a decision or outcome to keep ('' for all) and free text. */
export function matches(call: ICall, query: string, facet: string): boolean {
  if (facet && call.decision !== facet && call.outcome !== facet) {
    return false;
  }
  const needle = query.trim().toLowerCase();
  if (!needle) {
    return true;
  }
  const haystack = [
    call.tool,
    call.decision,
    call.rule,
    call.approver,
    call.outcome,
    call.errorMessage,
    oneLine(call.args, 10000)
  ]
    .join('\n')
    .toLowerCase();
  return haystack.includes(needle);
}

function sortValue(call: ICall, key: SortKey): string | number {
  switch (key) {
    case 'seq':
      return call.seq ?? -1;
    case 'duration':
      return call.durationMs ?? -1;
    case 'started':
      return call.started;
    default:
      return call[key];
  }
}

/** The calls sorted by `key` (stable; ties keep the recorded order). */
export function sortCalls(calls: ICall[], key: SortKey, ascending: boolean): ICall[] {
  const indexed = calls.map((call, index) => ({ call, index }));
  indexed.sort((a, b) => {
    const x = sortValue(a.call, key);
    const y = sortValue(b.call, key);
    const order = x < y ? -1 : x > y ? 1 : 0;
    return (ascending ? order : -order) || a.index - b.index;
  });
  return indexed.map(item => item.call);
}

/** How many calls have each value of `field` ("decision" or "outcome"), most frequent first. */
export function countBy(calls: ICall[], field: 'decision' | 'outcome' | 'tool'): [string, number][] {
  const counts = new Map<string, number>();
  for (const call of calls) {
    counts.set(call[field], (counts.get(call[field]) ?? 0) + 1);
  }
  return [...counts.entries()].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
}

export function formatDuration(ms: number | null): string {
  if (ms === null) {
    return '';
  }
  return ms < 1000 ? `${ms.toFixed(1)} ms` : `${(ms / 1000).toFixed(2)} s`;
}

/** A recorded ISO time as the reviewer reads it (UTC, to the millisecond), or the raw text if odd. */
export function formatTime(iso: string): string {
  const match = /^(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2}:\d{2}(?:\.\d{1,3})?)/.exec(iso);
  return match ? `${match[1]} ${match[2]}` : iso;
}
