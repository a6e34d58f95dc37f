/**
 * Pending approvals: the queue approver's requests for the open notebook's kernel, with the arguments
 * (as text), their sha256 and the deadline; approve and deny answer through the server extension, which
 * answers with the same code as `cellgate approvals` and only for the digest shown here.
 */

import { INotebookTracker } from '@jupyterlab/notebook';
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { query, requestAPI } from './api';
import { pretty } from './calls';

export interface IPendingRequest {
  id: string;
  session: string;
  seq: number;
  tool: string;
  args: unknown;
  args_sha256: string;
  cell_line: number | null;
  source_line: string | null;
  requested: number;
  deadline: number;
}

const POLL_MS = 1000;

function line(className: string, content: string): HTMLDivElement {
  const node = document.createElement('div');
  node.className = className;
  node.textContent = content;
  return node;
}

export class ApprovalsPanel extends Widget {
  private timer: number | null = null;
  private shown = '';
  private readonly list: HTMLDivElement;
  private readonly status: HTMLDivElement;

  constructor(private readonly tracker: INotebookTracker) {
    super();
    this.id = 'cellgate-approvals-panel';
    this.addClass('cg-side-panel');
    this.addClass('cg-approvals-panel');
    this.title.caption = 'cellgate: pending approvals';
    this.status = line('cg-panel-heading', '');
    this.list = document.createElement('div');
    this.list.className = 'cg-approvals';
    this.node.append(this.status, this.list);
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    this.timer = window.setInterval(() => void this.refresh(), POLL_MS);
    void this.refresh();
  }

  protected onBeforeDetach(msg: Message): void {
    if (this.timer !== null) {
      window.clearInterval(this.timer);
      this.timer = null;
    }
    super.onBeforeDetach(msg);
  }

  private kernelId(): string | null {
    return this.tracker.currentWidget?.sessionContext.session?.kernel?.id ?? null;
  }

  async refresh(): Promise<void> {
    if (!this.isVisible) {
      return;
    }
    const kernel = this.kernelId();
    if (!kernel) {
      this.display('no running kernel in the open notebook', []);
      return;
    }
    try {
      const reply = await requestAPI<{ requests: IPendingRequest[] }>('approvals' + query({ kernel }));
      const count = reply.requests.length;
      this.display(count ? `${count} pending for this kernel` : 'nothing pending for this kernel', reply.requests);
    } catch (error) {
      this.display(`could not list approvals: ${error instanceof Error ? error.message : String(error)}`, []);
    }
  }

  private display(status: string, requests: IPendingRequest[]): void {
    const key = JSON.stringify([status, requests.map(r => [r.id, r.args_sha256])]);
    if (key === this.shown) {
      this.updateDeadlines();
      return;
    }
    this.shown = key;
    this.status.textContent = status;
    this.list.replaceChildren(...requests.map(request => this.card(request)));
  }

  private updateDeadlines(): void {
    for (const node of this.list.querySelectorAll<HTMLElement>('.cg-approval-deadline')) {
      node.textContent = deadlineText(Number(node.dataset.deadline));
    }
  }

  private card(request: IPendingRequest): HTMLDivElement {
    const card = document.createElement('div');
    card.className = 'cg-approval';
    card.dataset.id = String(request.id);
    card.append(
      line('cg-approval-tool', `${request.tool} (call ${request.seq})`),
      line('cg-approval-where', request.cell_line ? `line ${request.cell_line}: ${request.source_line ?? ''}` : ''),
      line('cg-field-label', 'arguments'),
      Object.assign(document.createElement('pre'), { className: 'cg-pre cg-approval-args', textContent: pretty(request.args) }),
      line('cg-approval-digest', `sha256 ${request.args_sha256}`)
    );
    const deadline = line('cg-approval-deadline', deadlineText(request.deadline));
    deadline.dataset.deadline = String(request.deadline);
    card.appendChild(deadline);
    const answer = line('cg-approval-answer', '');
    const buttons = document.createElement('div');
    buttons.className = 'cg-approval-buttons';
    for (const decision of ['allow', 'deny'] as const) {
      const button = document.createElement('button');
      button.className = `jp-mod-styled cg-${decision === 'allow' ? 'approve' : 'deny'} ${
        decision === 'allow' ? 'jp-mod-accept' : 'jp-mod-warn'
      }`;
      button.textContent = decision === 'allow' ? 'approve' : 'deny';
      button.addEventListener('click', () => void this.answer(request, decision, buttons, answer));
      buttons.appendChild(button);
    }
    card.append(buttons, answer);
    return card;
  }

  private async answer(
    request: IPendingRequest,
    decision: 'allow' | 'deny',
    buttons: HTMLElement,
    answer: HTMLElement
  ): Promise<void> {
    buttons.querySelectorAll('button').forEach(button => (button.disabled = true));
    try {
      await requestAPI('approvals/' + encodeURIComponent(request.id), {
        method: 'POST',
        body: JSON.stringify({ decision, args_sha256: request.args_sha256, kernel: this.kernelId() })
      });
      answer.textContent = decision === 'allow' ? 'approved' : 'denied';
    } catch (error) {
      answer.textContent = error instanceof Error ? error.message : String(error);
      buttons.querySelectorAll('button').forEach(button => (button.disabled = false));
    }
  }
}

function deadlineText(deadline: number): string {
  if (!Number.isFinite(deadline) || deadline <= 0) {
    return 'deadline unknown';
  }
  const left = Math.round(deadline - Date.now() / 1000);
  const at = new Date(deadline * 1000).toISOString().replace('T', ' ').slice(0, 19);
  return `deadline ${at} UTC (${left > 0 ? `${left} s left` : 'passed'})`;
}
