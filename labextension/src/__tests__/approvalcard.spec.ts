import { approvalCard, IPendingRequest } from '../approvalcard';
import { KERNEL_CLAIM } from '../claims';

const HOSTILE = '<img src=x onerror="window.pwned=1">';

function request(overrides: Partial<IPendingRequest> = {}): IPendingRequest {
  return {
    id: 'r1', session: 's1', seq: 3, tool: 'create_task', args: { order_id: HOSTILE }, args_sha256: 'a'.repeat(64),
    cell_line: 2, source_line: `tools.create_task(${JSON.stringify(HOSTILE)})`, requested: 1, deadline: 2,
    ...overrides
  };
}

function where(card: HTMLElement): string {
  return card.querySelector('.cg-approval-where')?.textContent ?? '(none)';
}

describe('a pending approval in the panel', () => {
  it("labels the cell line as the kernel's claim, in the words `cellgate approvals list` uses", () => {
    expect(KERNEL_CLAIM).toBe('reported by the kernel');
    const card = approvalCard(request(), () => undefined);
    expect(where(card)).toBe(`cell line 2 (reported by the kernel): tools.create_task(${JSON.stringify(HOSTILE)})`);
    expect(card.querySelector('img')).toBeNull();
  });

  it('labels line 0 and a line without its source too, and claims nothing when the kernel said nothing', () => {
    expect(where(approvalCard(request({ cell_line: 0 }), () => undefined))).toMatch(
      /^cell line 0 \(reported by the kernel\): /
    );
    expect(where(approvalCard(request({ source_line: null }), () => undefined))).toBe(
      'cell line 2 (reported by the kernel): '
    );
    expect(where(approvalCard(request({ cell_line: null, source_line: null }), () => undefined))).toBe('');
  });

  it('shows no kernel claim that is not labelled as one', () => {
    const card = approvalCard(request(), () => undefined);
    const unlabelled = [...card.querySelectorAll('div')]
      .map(node => node.textContent ?? '')
      .filter(text => /\bline \d/.test(text) && !text.includes(KERNEL_CLAIM) && !text.includes('sha256'));
    expect(unlabelled).toEqual([]);
  });

  it('answers through the callback with the decision of the button pressed', () => {
    const answers: string[] = [];
    const card = approvalCard(request(), (r, decision) => answers.push(`${r.id} ${decision}`));
    card.querySelector<HTMLButtonElement>('.cg-deny')?.click();
    card.querySelector<HTMLButtonElement>('.cg-approve')?.click();
    expect(answers).toEqual(['r1 deny', 'r1 allow']);
  });
});
