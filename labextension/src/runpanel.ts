/**
 * The run panel: what the open audit notebook says about its run (session, sandbox, policy and manifest
 * hashes, totals) and the result of `cellgate verify`, run by the server on the notebook's own path. For a
 * notebook with a live cellgate kernel: the audit notebook that kernel records to (as the server knows it from
 * host state), a link that opens it when it is under the server's root, and "still running" while it goes.
 */

import { PageConfig, URLExt } from '@jupyterlab/coreutils';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { Widget } from '@lumino/widgets';

import { query, requestAPI } from './api';
import { runMetadata } from './audit';
import { ILiveRun, IVerifyReply, liveRunFacts, verdictOf } from './liverun';
import { runFacts } from './record';

const RECHECK_MS = 1000; // while a live kernel's launcher has not said yet which notebook it records to
const RECHECKS = 300;

function auditHref(path: string): string {
  return URLExt.join(PageConfig.getBaseUrl(), 'lab', 'tree', URLExt.encodeParts(path));
}

export class RunPanel extends Widget {
  private panel: NotebookPanel | null = null;
  private readonly watched = new WeakSet<NotebookPanel>();
  private readonly facts: HTMLDListElement;
  private readonly verdict: HTMLDivElement;
  private readonly heading: HTMLDivElement;
  private recheck: number | null = null;
  private rechecks = 0;
  private auditPath: string | null = null; // the live kernel's audit notebook under the root, to verify
  private shownRun = ''; // the live kernel's facts as last shown

  /** `open` opens a path of the server's root in Lab (the audit notebook's link). */
  constructor(tracker: INotebookTracker, private readonly open: (path: string) => void) {
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
    if (panel && !this.watched.has(panel)) {
      this.watched.add(panel);
      // A kernel started, restarted or changed, or a cell ran: ask the server again what the kernel records to.
      panel.sessionContext.kernelChanged.connect(() => this.panel === panel && this.render());
      panel.sessionContext.statusChanged.connect((_, status) => {
        if (this.panel === panel && status === 'idle' && !runMetadata(panel)) {
          void this.live(panel);
        }
      });
    }
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
    this.auditPath = null;
    this.shownRun = '';
    this.stopRecheck();
    const panel = this.panel;
    const metadata = panel && panel.context.isReady ? runMetadata(panel) : null;
    if (panel && panel.context.isReady && !metadata) {
      this.heading.textContent = `${panel.context.path} is not a cellgate audit notebook`;
      void this.live(panel);
      return;
    }
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

  /** A notebook that is not a record: if its kernel is a live cellgate kernel, show where it records. */
  private async live(panel: NotebookPanel): Promise<void> {
    const kernel = panel.sessionContext.session?.kernel?.id;
    if (!kernel) {
      return;
    }
    let run: ILiveRun;
    try {
      run = await requestAPI<ILiveRun>('kernel' + query({ kernel }));
    } catch (error) {
      run = { cellgate: false };
      if (this.panel === panel) {
        this.verdict.className = 'cg-verdict cg-verdict-error';
        this.verdict.textContent = `could not ask the server about the kernel: ${
          error instanceof Error ? error.message : String(error)
        }`;
      }
    }
    if (this.panel !== panel || runMetadata(panel) || !run.cellgate) {
      return;
    }
    this.heading.textContent = `${panel.context.path}: a live cellgate kernel`;
    const key = JSON.stringify(run);
    if (key !== this.shownRun) {  // unchanged facts stay as they are (a link is not replaced under the pointer)
      this.shownRun = key;
      this.facts.replaceChildren(...liveRunFacts(run, this.open, auditHref));
    }
    // Verified again after each cell (this runs on each idle): the record so far, as its journal says.
    this.auditPath = run.state === 'running' && typeof run.path === 'string' && run.path ? run.path : null;
    if (this.auditPath) {
      void this.verify();
    }
    this.stopRecheck();
    if ((run.state === 'starting' || run.state === 'restarting') && this.rechecks < RECHECKS) {
      this.rechecks += 1;
      this.recheck = window.setTimeout(() => void this.live(panel), RECHECK_MS);
    } else if (run.state === 'running') {
      this.rechecks = 0;
    }
  }

  private stopRecheck(): void {
    if (this.recheck !== null) {
      window.clearTimeout(this.recheck);
      this.recheck = null;
    }
  }

  async verify(): Promise<void> {
    const panel = this.panel;
    const path = panel && runMetadata(panel) ? panel.context.path : this.auditPath;
    if (!panel || !path) {
      return;
    }
    this.verdict.className = 'cg-verdict cg-verdict-running';
    this.verdict.textContent = 'cellgate verify: running…';
    let shown: string;
    let state: string;
    try {
      const verdict = verdictOf(await requestAPI<IVerifyReply>('verify' + query({ path })));
      state = verdict.state;
      shown = path === panel.context.path ? verdict.text : `the audit notebook: ${verdict.text}`;
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
