/**
 * One pending approval as the panel shows it: the tool and call, the cell line the kernel says it was asked
 * from (labelled as the kernel's claim), the arguments (as text), their sha256, the deadline and the approve
 * and deny buttons. Pure DOM (`textContent` only, nothing parsed as HTML) and no JupyterLab, so jest renders
 * it as the panel does.
 */

import { pretty } from './calls';
import { claimedLine } from './claims';

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

export type Decision = 'allow' | 'deny';
/** Called when a button is pressed, with the buttons (to disable) and the node for the answer. */
export type Answer = (request: IPendingRequest, decision: Decision, buttons: HTMLElement, answer: HTMLElement) => void;

export function line(className: string, content: string): HTMLDivElement {
  const node = document.createElement('div');
  node.className = className;
  node.textContent = content;
  return node;
}

export function deadlineText(deadline: number, now: number = Date.now()): string {
  if (!Number.isFinite(deadline) || deadline <= 0) {
    return 'deadline unknown';
  }
  const left = Math.round(deadline - now / 1000);
  const at = new Date(deadline * 1000).toISOString().replace('T', ' ').slice(0, 19);
  return `deadline ${at} UTC (${left > 0 ? `${left} s left` : 'passed'})`;
}

export function approvalCard(request: IPendingRequest, onAnswer: Answer): HTMLDivElement {
  const card = document.createElement('div');
  card.className = 'cg-approval';
  card.dataset.id = String(request.id);
  card.append(
    line('cg-approval-tool', `${request.tool} (call ${request.seq})`),
    line('cg-approval-where', claimedLine(request.cell_line, request.source_line)),
    line('cg-field-label', 'arguments'),
    Object.assign(document.createElement('pre'), {
      className: 'cg-pre cg-approval-args',
      textContent: pretty(request.args)
    }),
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
    button.addEventListener('click', () => onAnswer(request, decision, buttons, answer));
    buttons.appendChild(button);
  }
  card.append(buttons, answer);
  return card;
}
