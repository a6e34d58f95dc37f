/**
 * Pending approvals: the queue approver's requests for the open notebook's kernel, with the arguments
 * (as text), their sha256 and the deadline; approve and deny answer through the server extension, which
 * answers with the same code as `cellgate approvals` and only for the digest shown here.
 */

import { INotebookTracker } from '@jupyterlab/notebook';
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { query, requestAPI } from './api';
import { approvalCard, deadlineText, Decision, IPendingRequest, line } from './approvalcard';

const POLL_MS = 1000;

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
    this.list.replaceChildren(...requests.map(request =>
      approvalCard(request, (r, decision, buttons, answer) => void this.answer(r, decision, buttons, answer))
    ));
  }

  private updateDeadlines(): void {
    for (const node of this.list.querySelectorAll<HTMLElement>('.cg-approval-deadline')) {
      node.textContent = deadlineText(Number(node.dataset.deadline));
    }
  }

  private async answer(
    request: IPendingRequest,
    decision: Decision,
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
