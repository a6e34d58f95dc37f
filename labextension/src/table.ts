/**
 * The calls table: sortable columns, a text filter and a decision/outcome filter, and a row per call that
 * expands to its arguments, result or error and approval. Built with the DOM API and `textContent` only:
 * nothing from the bundle is ever parsed as HTML.
 */

import {
  countBy,
  formatDuration,
  formatTime,
  ICall,
  matches,
  oneLine,
  pretty,
  sortCalls,
  SortKey
} from './calls';
import { claimedLine } from './claims';

/** Fetches a result blob's text through the server (the run's own blob folder only). */
export type BlobFetcher = (call: ICall) => Promise<string>;

const COLUMNS: [SortKey | null, string][] = [
  ['seq', '#'],
  ['tool', 'tool'],
  [null, 'arguments'],
  ['decision', 'decision'],
  ['outcome', 'outcome'],
  ['started', 'started (UTC)'],
  ['duration', 'time']
];

function element<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  className: string,
  content = ''
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  node.className = className;
  node.textContent = content;
  return node;
}

function field(parent: HTMLElement, label: string, value: string): void {
  if (!value) {
    return;
  }
  const row = element('div', 'cg-field');
  row.append(element('span', 'cg-field-label', label), element('span', 'cg-field-value', value));
  parent.appendChild(row);
}

function block(parent: HTMLElement, label: string, value: string): HTMLPreElement {
  parent.appendChild(element('div', 'cg-field-label', label));
  const pre = element('pre', 'cg-pre', value);
  parent.appendChild(pre);
  return pre;
}

export class CallsTable {
  readonly node: HTMLDivElement;
  private calls: ICall[] = [];
  private query = '';
  private facet = '';
  private sortKey: SortKey = 'seq';
  private ascending = true;
  private expanded = new Set<number>();
  private readonly body: HTMLTableSectionElement;
  private readonly head: HTMLTableRowElement;
  private readonly summary: HTMLDivElement;
  private readonly facets: HTMLSelectElement;
  private readonly filter: HTMLInputElement;

  constructor(private readonly fetchBlob: BlobFetcher | null) {
    this.node = element('div', 'cg-calls');
    this.summary = element('div', 'cg-calls-summary');
    const controls = element('div', 'cg-calls-controls');
    this.filter = element('input', 'cg-calls-filter');
    this.filter.type = 'search';
    this.filter.placeholder = 'filter calls (tool, arguments, rule, error)';
    this.filter.addEventListener('input', () => {
      this.query = this.filter.value;
      this.renderRows();
    });
    this.facets = element('select', 'cg-calls-facet');
    this.facets.addEventListener('change', () => {
      this.facet = this.facets.value;
      this.renderRows();
    });
    controls.append(this.filter, this.facets);
    const table = element('table', 'cg-calls-table');
    const thead = element('thead', '');
    this.head = element('tr', '');
    thead.appendChild(this.head);
    this.body = element('tbody', '');
    table.append(thead, this.body);
    this.node.append(this.summary, controls, table);
  }

  /** Show these calls (resets neither the filter nor the sort a reviewer chose). */
  setCalls(calls: ICall[]): void {
    this.calls = calls;
    this.expanded.clear();
    this.summary.textContent =
      `${calls.length} call${calls.length === 1 ? '' : 's'}: ` +
      countBy(calls, 'decision')
        .map(([value, count]) => `${count} ${value}`)
        .join(', ') +
      '; outcomes: ' +
      countBy(calls, 'outcome')
        .map(([value, count]) => `${count} ${value}`)
        .join(', ');
    const values = new Set<string>();
    for (const call of calls) {
      values.add(call.decision);
      values.add(call.outcome);
    }
    this.facets.replaceChildren(element('option', '', 'all decisions and outcomes'));
    (this.facets.firstChild as HTMLOptionElement).value = '';
    for (const value of [...values].sort()) {
      const option = element('option', '', value);
      option.value = value;
      this.facets.appendChild(option);
    }
    this.facets.value = values.has(this.facet) ? this.facet : '';
    this.facet = this.facets.value;
    this.renderHead();
    this.renderRows();
  }

  /** Filter as a reviewer would (what the tests drive). */
  setFilter(query: string, facet = ''): void {
    this.filter.value = query;
    this.query = query;
    this.facets.value = facet;
    this.facet = this.facets.value;
    this.renderRows();
  }

  sortBy(key: SortKey): void {
    this.ascending = this.sortKey === key ? !this.ascending : true;
    this.sortKey = key;
    this.renderHead();
    this.renderRows();
  }

  private renderHead(): void {
    this.head.replaceChildren();
    this.head.appendChild(element('th', 'cg-col-expand'));
    for (const [key, label] of COLUMNS) {
      const th = element('th', key ? 'cg-sortable' : '', label);
      if (key) {
        th.dataset.sort = key;
        th.title = `sort by ${label}`;
        if (key === this.sortKey) {
          th.textContent = `${label} ${this.ascending ? '▲' : '▼'}`;
          th.setAttribute('aria-sort', this.ascending ? 'ascending' : 'descending');
        }
        th.addEventListener('click', () => this.sortBy(key));
      }
      this.head.appendChild(th);
    }
  }

  private renderRows(): void {
    const shown = sortCalls(this.calls, this.sortKey, this.ascending).filter(call => matches(call, this.query, this.facet));
    this.body.replaceChildren();
    shown.forEach(call => this.body.append(...this.rows(call)));
    if (!shown.length) {
      const empty = element('td', 'cg-calls-empty', 'no call matches the filter');
      empty.colSpan = COLUMNS.length + 1;
      const row = element('tr', '');
      row.appendChild(empty);
      this.body.appendChild(row);
    }
  }

  private rows(call: ICall): HTMLTableRowElement[] {
    const key = this.calls.indexOf(call);
    const row = element('tr', `cg-call cg-outcome-${call.ok ? 'ok' : 'failed'}`);
    row.dataset.decision = call.decision;
    row.dataset.outcome = call.outcome;
    const toggle = element('button', 'cg-expand', this.expanded.has(key) ? '▾' : '▸');
    toggle.title = 'show arguments, result and approval';
    toggle.setAttribute('aria-expanded', String(this.expanded.has(key)));
    toggle.addEventListener('click', () => {
      if (this.expanded.has(key)) {
        this.expanded.delete(key);
      } else {
        this.expanded.add(key);
      }
      this.renderRows();
    });
    const first = element('td', 'cg-col-expand');
    first.appendChild(toggle);
    row.append(
      first,
      element('td', 'cg-col-seq', call.seq === null ? '' : String(call.seq)),
      element('td', 'cg-col-tool', call.tool),
      element('td', 'cg-col-args', oneLine(call.args)),
      element('td', `cg-col-decision cg-decision-${call.decision}`, call.decision),
      element('td', 'cg-col-outcome', call.outcome),
      element('td', 'cg-col-started', formatTime(call.started)),
      element('td', 'cg-col-duration', formatDuration(call.durationMs))
    );
    if (!this.expanded.has(key)) {
      return [row];
    }
    const detail = element('tr', 'cg-call-detail');
    const cell = element('td', '');
    cell.colSpan = COLUMNS.length + 1;
    detail.appendChild(cell);
    this.details(cell, call);
    return [row, detail];
  }

  private details(cell: HTMLElement, call: ICall): void {
    field(cell, 'rule', call.rule);
    field(cell, 'approver', call.approver);
    field(cell, 'answered', formatTime(call.approvalAnswered));
    field(cell, 'approver said', call.approvalReason);
    field(cell, 'where', claimedLine(call.claimedLine, call.claimedSource));
    block(cell, `arguments (sha256 ${call.argsSha256.slice(0, 16)}…)`, pretty(call.args));
    if (!call.ok) {
      block(cell, `error${call.errorKind ? ` (${call.errorKind})` : ''}`, call.errorMessage || '(none)');
      return;
    }
    const size = call.resultBytes === null ? '' : `, ${call.resultBytes.toLocaleString('en')} bytes`;
    if (call.hasResult) {
      block(cell, `result${size}`, pretty(call.result));
      return;
    }
    const pre = block(cell, `result preview${size}`, call.resultPreview + '…');
    if (call.resultBlob && this.fetchBlob) {
      const load = element('button', 'cg-load-blob', `load the whole result (${call.resultBlob})`);
      load.addEventListener('click', () => {
        load.disabled = true;
        pre.textContent = 'loading…';
        this.fetchBlob!(call).then(
          value => {
            pre.textContent = value;
            pre.classList.add('cg-blob-loaded');
            load.remove();
          },
          (error: unknown) => {
            pre.textContent = `could not load the blob: ${error instanceof Error ? error.message : String(error)}`;
            load.disabled = false;
          }
        );
      });
      cell.appendChild(load);
    }
  }
}
