import { countBy, matches, outcomeOf, parseBundle, parseCall, sortCalls } from '../calls';
import { CallsTable } from '../table';
import { runFacts, statusOf } from '../record';

const HOSTILE = '<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>';

const RECORDED = [
  {
    seq: 1, tool: 'list_orders', args: { month: '2026-10' }, args_sha256: 'a'.repeat(64), decision: 'allow',
    rule: 'tools.list_orders.decision', ok: true, started: '2026-12-01T03:09:02.475Z', duration_ms: 170.5,
    result_blob: 'out.blobs/' + 'b'.repeat(64) + '.json', result_sha256: 'b'.repeat(64), result_bytes: 879592,
    result_preview: '[{"amount":486.86'
  },
  {
    seq: 2, tool: 'create_task', args: { order_id: HOSTILE, kind: 'refund' }, args_sha256: 'c'.repeat(64),
    decision: 'approved', rule: 'tools.create_task.decision', ok: true, started: '2026-12-01T03:09:03.000Z',
    duration_ms: 2500, approval: { approver: 'queue:uid 0', answered: '2026-12-01T03:09:05.000Z', reason: '' },
    result: { task: 7 }
  },
  {
    seq: 3, tool: 'create_task', args: { order_id: 'x', kind: 'escalate' }, decision: 'approval-denied',
    rule: 'tools.create_task.decision', ok: false, started: '2026-12-01T03:09:04.000Z', duration_ms: 1,
    error: { kind: 'denied', message: HOSTILE }
  },
  { seq: 4, tool: 'slow', args: {}, decision: 'allow', ok: false, started: '2026-12-01T03:09:06.000Z',
    duration_ms: 30000, error: { kind: 'timeout', message: 'tool slow timed out after 30 s' } }
];

describe('parsing the recorded calls', () => {
  it('reads the host bundle and a bare list alike', () => {
    expect(parseBundle({ calls: RECORDED })).toHaveLength(4);
    expect(parseBundle(RECORDED)).toHaveLength(4);
    expect(parseBundle({ calls: 'nonsense' })).toEqual([]);
    expect(parseBundle(null)).toEqual([]);
  });

  it('turns fields of the wrong type into empty ones', () => {
    const call = parseCall({ seq: '1', tool: 5, decision: { x: 1 }, ok: 'true', approval: [], error: 'boom' });
    expect(call.seq).toBeNull();
    expect(call.tool).toBe('?');
    expect(call.decision).toBe('?');
    expect(call.ok).toBe(false);
    expect(call.errorMessage).toBe('boom');
  });

  it('names each outcome', () => {
    const calls = parseBundle(RECORDED);
    expect(calls.map(call => call.outcome)).toEqual(['ok', 'ok', 'denied', 'timeout']);
    expect(calls[1].approver).toBe('queue:uid 0');
    expect(outcomeOf(false, 'allow', '')).toBe('error');
    expect(outcomeOf(false, 'deny', '')).toBe('not run');
  });

  it('reads a call refused before any rule as show does, whatever an older record says', () => {
    const invalid = parseCall({ seq: 5, tool: 'add', decision: 'deny', ok: false, error: { kind: 'invalid' } });
    const missing = parseCall({ seq: 6, tool: 'nope', decision: 'deny', ok: false, error: { kind: 'not_found' } });
    const denied = parseCall({ seq: 7, tool: 'rm', decision: 'deny', ok: false, error: { kind: 'denied' } });
    expect([invalid.decision, missing.decision, denied.decision]).toEqual(['invalid', 'not-found', 'deny']);
  });

  it('filters on text and on a decision or outcome', () => {
    const calls = parseBundle(RECORDED);
    expect(calls.filter(call => matches(call, 'refund', '')).map(c => c.seq)).toEqual([2]);
    expect(calls.filter(call => matches(call, '', 'timeout')).map(c => c.seq)).toEqual([4]);
    expect(calls.filter(call => matches(call, 'CREATE_', 'approved')).map(c => c.seq)).toEqual([2]);
    expect(calls.filter(call => matches(call, 'nothing like it', '')).length).toBe(0);
  });

  it('sorts stably both ways', () => {
    const calls = parseBundle(RECORDED);
    expect(sortCalls(calls, 'duration', false).map(c => c.seq)).toEqual([4, 2, 1, 3]);
    expect(sortCalls(calls, 'tool', true).map(c => c.seq)).toEqual([2, 3, 1, 4]);
    expect(countBy(calls, 'tool')).toEqual([['create_task', 2], ['list_orders', 1], ['slow', 1]]);
  });
});

describe('the calls table', () => {
  function table(fetch: jest.Mock | null = null): CallsTable {
    const shown = new CallsTable(fetch);
    shown.setCalls(parseBundle({ calls: RECORDED }));
    document.body.replaceChildren(shown.node);
    return shown;
  }
  const seqs = (): string[] =>
    [...document.querySelectorAll('tr.cg-call .cg-col-seq')].map(cell => cell.textContent ?? '');

  it('lists every call with a summary', () => {
    table();
    expect(seqs()).toEqual(['1', '2', '3', '4']);
    expect(document.querySelector('.cg-calls-summary')?.textContent).toBe(
      '4 calls: 2 allow, 1 approval-denied, 1 approved; outcomes: 2 ok, 1 denied, 1 timeout'
    );
  });

  it('shows hostile arguments and errors as text, never as markup', () => {
    table();
    document.querySelectorAll<HTMLButtonElement>('.cg-expand').forEach(button => button.click());
    document.querySelectorAll<HTMLButtonElement>('.cg-expand').forEach(button => button.click());
    expect(document.querySelectorAll('.cg-call-detail')).toHaveLength(0);
    document.querySelectorAll<HTMLButtonElement>('.cg-expand')[1].click();
    document.querySelectorAll<HTMLButtonElement>('.cg-expand')[2].click();
    expect(document.querySelector('img, script')).toBeNull();
    const details = [...document.querySelectorAll('.cg-call-detail')].map(row => row.textContent ?? '');
    expect(details[0]).toContain('"order_id": "<img src=x onerror=');
    expect(details[0]).toContain('<script>window.pwned=2</script>');
    expect(details[0]).toContain('queue:uid 0');
    expect(details[1]).toContain(`error (denied)${HOSTILE}`);
  });

  it("labels the cell line a call was made from as the kernel's claim", () => {
    const shown = new CallsTable(null);
    shown.setCalls(parseBundle([{ ...RECORDED[3], claimed: { line: 4, source_line: 'tools.slow()' } }]));
    document.body.replaceChildren(shown.node);
    document.querySelector<HTMLButtonElement>('.cg-expand')!.click();
    expect(document.querySelector('.cg-call-detail')?.textContent).toContain(
      'wherecell line 4 (reported by the kernel): tools.slow()'
    );
  });

  it('filters as the reviewer types and picks', () => {
    const shown = table();
    const input = document.querySelector<HTMLInputElement>('.cg-calls-filter')!;
    input.value = 'escalate';
    input.dispatchEvent(new Event('input'));
    expect(seqs()).toEqual(['3']);
    shown.setFilter('', 'ok');
    expect(seqs()).toEqual(['1', '2']);
    const facet = document.querySelector<HTMLSelectElement>('.cg-calls-facet')!;
    facet.value = 'timeout';
    facet.dispatchEvent(new Event('change'));
    expect(seqs()).toEqual(['4']);
    shown.setFilter('no such call');
    expect(document.querySelector('.cg-calls-empty')?.textContent).toBe('no call matches the filter');
  });

  it('sorts when a header is clicked, and again the other way', () => {
    table();
    const header = (): HTMLElement => document.querySelector<HTMLElement>('th[data-sort="duration"]')!;
    header().click();
    expect(seqs()).toEqual(['3', '1', '2', '4']);
    header().click();
    expect(seqs()).toEqual(['4', '2', '1', '3']);
    expect(header().getAttribute('aria-sort')).toBe('descending');
  });

  it('loads a blob through the fetcher it was given, as text', async () => {
    const fetch = jest.fn().mockResolvedValue('[{"amount": 486.86}] <b>bold?</b>');
    table(fetch);
    document.querySelector<HTMLButtonElement>('.cg-expand')!.click();
    document.querySelector<HTMLButtonElement>('.cg-load-blob')!.click();
    await new Promise(resolve => setTimeout(resolve, 0));
    expect(fetch).toHaveBeenCalledTimes(1);
    expect(fetch.mock.calls[0][0].resultSha256).toBe('b'.repeat(64));
    expect(document.querySelector('.cg-blob-loaded')?.textContent).toBe('[{"amount": 486.86}] <b>bold?</b>');
    expect(document.querySelector('b')).toBeNull();
  });

  it('offers no blob button without a fetcher', () => {
    table(null);
    document.querySelector<HTMLButtonElement>('.cg-expand')!.click();
    expect(document.querySelector('.cg-load-blob')).toBeNull();
    expect(document.querySelector('.cg-call-detail')?.textContent).toContain('result preview, 879,592 bytes');
  });
});

describe('the record of a run', () => {
  it('reads a cell status, and marks an unknown one as other', () => {
    expect(statusOf({ status: 'timeout', limits_hit: ['cell_timeout', 3] })).toEqual({
      status: 'timeout', limits: 'cell_timeout'
    });
    expect(statusOf({ status: '<b>new</b>' })?.status).toBe('other');
    expect(statusOf({})).toBeNull();
    expect(statusOf('ok')).toBeNull();
  });

  it('sums up the run', () => {
    const facts = new Map(
      runFacts(
        { session_id: 's1', policy: { sha256: 'p'.repeat(64) }, tools: { manifest_sha256: 'm' },
          sandbox: { isolation: 'gvisor', network: 'none' } },
        [
          { metadata: { cellgate: { status: 'ok', calls: RECORDED.slice(0, 2) } } },
          { metadata: { cellgate: { status: 'timeout', calls: RECORDED.slice(2) } } },
          { metadata: {} }
        ]
      )
    );
    expect(facts.get('session')).toBe('s1');
    expect(facts.get('sandbox')).toBe('gvisor, network none');
    expect(facts.get('cells')).toBe('3; 1 ok, 1 timeout');
    expect(facts.get('calls')).toBe('4; 2 allow, 1 approval-denied, 1 approved');
    expect(facts.get('outcomes')).toBe('2 ok, 1 denied, 1 timeout');
  });
});
