/**
 * Audit notebooks (`metadata.cellgate` marks them): opened read-only with no kernel started, and each code
 * cell's recorded status shown as a badge above it.
 */

import { NotebookPanel } from '@jupyterlab/notebook';
import { Cell } from '@jupyterlab/cells';
import { Notification } from '@jupyterlab/apputils';
import { PanelLayout, Widget } from '@lumino/widgets';

import { statusOf } from './record';

/** The record's `metadata.cellgate` of a notebook, or null when it is not an audit notebook. */
export function runMetadata(panel: NotebookPanel): Record<string, any> | null {
  const value = panel.context.model?.getMetadata('cellgate');
  return value !== null && typeof value === 'object' && !Array.isArray(value) ? value : null;
}

class StatusBadge extends Widget {
  constructor(status: string, recorded: string, limits: string, duration: string) {
    super();
    this.addClass('cg-badge-row');
    const badge = document.createElement('span');
    badge.className = `cg-badge cg-status-${status}`;
    badge.dataset.status = recorded;
    badge.textContent = recorded;
    badge.title = `cellgate recorded this cell as ${recorded}${limits ? ` (limits hit: ${limits})` : ''}`;
    this.node.appendChild(badge);
    if (duration) {
      const time = document.createElement('span');
      time.className = 'cg-badge-time';
      time.textContent = duration;
      this.node.appendChild(time);
    }
  }
}

function secondsBetween(started: unknown, ended: unknown): string {
  const start = typeof started === 'string' ? Date.parse(started) : NaN;
  const end = typeof ended === 'string' ? Date.parse(ended) : NaN;
  return Number.isFinite(start) && Number.isFinite(end) && end >= start ? `${((end - start) / 1000).toFixed(2)} s` : '';
}

export function addBadge(cell: Cell): void {
  const metadata = cell.model.getMetadata('cellgate');
  const found = statusOf(metadata);
  const layout = cell.layout as PanelLayout | null;
  if (!found || !layout || layout.widgets.some(widget => widget instanceof StatusBadge)) {
    return;
  }
  const record = metadata as Record<string, unknown>;
  layout.insertWidget(
    0,
    new StatusBadge(found.status, String(record.status).slice(0, 40), found.limits,
                    secondsBetween(record.started, record.ended))
  );
}

/** Make an audit notebook a read-only record: no kernel, no editing, no saving over it. */
export function openAsRecord(panel: NotebookPanel): void {
  const context = panel.context;
  context.sessionContext.kernelPreference = {
    ...context.sessionContext.kernelPreference,
    shouldStart: false,
    canStart: false,
    autoStartDefault: false
  };
  context.model.readOnly = true;
  panel.addClass('cg-audit-notebook');
  const note = new Widget();
  note.addClass('cg-record-note');
  note.node.textContent = 'cellgate audit record: read-only, no kernel';
  note.node.title = 'The notebook is the record of a run; `cellgate verify` checks it against its journal';
  panel.toolbar.addItem('cellgate-record', note);
  // Saving would rewrite the record with the frontend's serialization: refuse it here.
  context.save = async () => {
    Notification.warning('This is a cellgate audit record: it is read-only and is never saved from JupyterLab.');
  };
  const lock = (): void => {
    for (const cell of panel.content.widgets) {
      cell.syncEditable = false; // read-only in the view only: the record's metadata stays as it is
      cell.readOnly = true;
      addBadge(cell);
    }
  };
  lock();
  panel.content.model?.cells.changed.connect(lock);
}

/** Watch a notebook panel: once its content is loaded, an audit notebook becomes a record. */
export function watchNotebook(panel: NotebookPanel): void {
  // `ready` resolves before the context applies its kernel preference and starts a kernel, so the
  // preference set here is the one it uses.
  void panel.context.ready.then(() => {
    if (runMetadata(panel)) {
      openAsRecord(panel);
    }
  });
}
