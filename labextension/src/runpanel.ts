/**
 * The run panel: what the open audit notebook says about its run (session, sandbox, policy and manifest
 * hashes, totals) and the result of `cellgate verify`, run by the server on the notebook's own path.
 */

import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { Widget } from '@lumino/widgets';

import { query, requestAPI } from './api';
import { runMetadata } from './audit';
import { runFacts } from './record';

export interface IVerifyReply {
  ok: boolean;
  problems: string[];
  records: number;
  blobs: number;
  key_id: string | null;
}

export class RunPanel extends Widget {
  private panel: NotebookPanel | null = null;
  private readonly facts: HTMLDListElement;
  private readonly verdict: HTMLDivElement;
  private readonly heading: HTMLDivElement;

  constructor(tracker: INotebookTracker) {
    super();
    this.id = 'cellgate-run-panel';
    this.addClass('cg-side-panel');
    this.addClass('cg-run-panel');
    this.title.caption = 'cellgate run';
    this.heading = document.createElement('div');
    this.heading.className = 'cg-panel-heading';
    this.facts = document.createElement('dl');
    this.facts.className = 'cg-run-facts';
    const verify = document.createElement('button');
    verify.className = 'cg-verify jp-mod-styled';
    verify.textContent = 'verify again';
    verify.addEventListener('click', () => void this.verify());
    this.verdict = document.createElement('div');
    this.verdict.className = 'cg-verdict';
    this.node.append(this.heading, this.facts, this.verdict, verify);
    tracker.currentChanged.connect(() => this.follow(tracker.currentWidget));
    this.follow(tracker.currentWidget);
  }

  private follow(panel: NotebookPanel | null): void {
    this.panel = panel;
    this.render();
    if (panel) {
      void panel.context.ready.then(() => {
        if (this.panel === panel) {
          this.render();
          void this.verify();
        }
      });
    }
  }

  private render(): void {
    this.facts.replaceChildren();
    this.verdict.textContent = '';
    this.verdict.className = 'cg-verdict';
    const panel = this.panel;
    const metadata = panel && panel.context.isReady ? runMetadata(panel) : null;
    if (!panel || !metadata) {
      this.heading.textContent = panel ? `${panel.context.path} is not a cellgate audit notebook` : 'no notebook open';
      return;
    }
    this.heading.textContent = panel.context.path;
    const cells = (panel.context.model.toJSON() as { cells?: unknown[] }).cells ?? [];
    for (const [label, value] of runFacts(metadata, cells)) {
      const dt = document.createElement('dt');
      dt.textContent = label;
      const dd = document.createElement('dd');
      dd.textContent = value;
      dd.dataset.fact = label;
      this.facts.append(dt, dd);
    }
  }

  async verify(): Promise<void> {
    const panel = this.panel;
    if (!panel || !runMetadata(panel)) {
      return;
    }
    this.verdict.className = 'cg-verdict cg-verdict-running';
    this.verdict.textContent = 'cellgate verify: running…';
    let shown: string;
    let state: string;
    try {
      const reply = await requestAPI<IVerifyReply>('verify' + query({ path: panel.context.path }));
      state = reply.ok ? 'ok' : 'failed';
      shown = reply.ok
        ? `verified: matches its journal; ${reply.records} records signed with this host's key ` +
          `${reply.key_id}; ${reply.blobs} result blob(s) match their sha256`
        : `FAILED:\n${reply.problems.join('\n')}`;
    } catch (error) {
      state = 'error';
      shown = `cellgate verify could not run: ${error instanceof Error ? error.message : String(error)}`;
    }
    if (this.panel === panel) {
      this.verdict.className = `cg-verdict cg-verdict-${state}`;
      this.verdict.textContent = shown;
    }
  }
}
