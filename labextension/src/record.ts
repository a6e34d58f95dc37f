/** What a notebook's record says about its cells and its run (pure: no DOM, no JupyterLab). */

import { countBy, parseBundle } from './calls';

export const STATUSES = ['ok', 'error', 'timeout', 'killed', 'memory', 'rejected', 'interrupted'];

/** The recorded status of a cell: one of STATUSES, or `other` for anything else a record says. */
export function statusOf(metadata: unknown): { status: string; limits: string } | null {
  if (metadata === null || typeof metadata !== 'object') {
    return null;
  }
  const record = metadata as Record<string, unknown>;
  if (typeof record.status !== 'string') {
    return null;
  }
  const limits = Array.isArray(record.limits_hit)
    ? record.limits_hit.filter(item => typeof item === 'string').join(', ')
    : '';
  return { status: STATUSES.includes(record.status) ? record.status : 'other', limits };
}

function text(value: unknown): string {
  return typeof value === 'string' || typeof value === 'number' ? String(value) : '';
}

function dig(value: unknown, ...keys: string[]): unknown {
  for (const key of keys) {
    value = value !== null && typeof value === 'object' ? (value as Record<string, unknown>)[key] : undefined;
  }
  return value;
}

/** The facts the panel lists, as [label, value] pairs (values are text from the notebook). */
export function runFacts(metadata: Record<string, unknown>, cells: unknown[]): [string, string][] {
  const statuses = new Map<string, number>();
  const calls = [];
  for (const cell of cells) {
    const record = dig(cell, 'metadata', 'cellgate');
    const found = statusOf(record);
    if (found) {
      const status = String((record as Record<string, unknown>).status).slice(0, 40);
      statuses.set(status, (statuses.get(status) ?? 0) + 1);
    }
    calls.push(...parseBundle({ calls: dig(record, 'calls') }));
  }
  const sandbox = [
    dig(metadata, 'sandbox', 'isolation'),
    dig(metadata, 'sandbox', 'platform'),
    `network ${text(dig(metadata, 'sandbox', 'network')) || '?'}`,
    dig(metadata, 'sandbox', 'runsc_version')
  ]
    .map(text)
    .filter(Boolean)
    .join(', ');
  const joined = (pairs: [string, number][]): string => pairs.map(([k, n]) => `${n} ${k}`).join(', ') || 'none';
  return [
    ['session', text(metadata.session_id)],
    ['sandbox', sandbox],
    ['policy sha256', text(dig(metadata, 'policy', 'sha256'))],
    ['manifest sha256', text(dig(metadata, 'tools', 'manifest_sha256'))],
    ['journal', `${text(dig(metadata, 'journal', 'file'))} (record ${text(dig(metadata, 'journal', 'seq'))})`],
    ['signed with key', text(dig(metadata, 'integrity', 'key_id'))],
    ['cells', `${cells.length}; ${joined([...statuses.entries()])}`],
    ['calls', `${calls.length}; ${joined(countBy(calls, 'decision'))}`],
    ['outcomes', joined(countBy(calls, 'outcome'))],
    ['tools', joined(countBy(calls, 'tool'))]
  ];
}

