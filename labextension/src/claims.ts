/**
 * What the kernel says about a call (the cell line it was made from, and the line's text) is its claim, not
 * something the host checked: every view labels it so, in the words of `cellgate approvals list`
 * (`cell line N (reported by the kernel): SOURCE`).
 */

export const KERNEL_CLAIM = 'reported by the kernel';

/** `cell line N (reported by the kernel): SOURCE`, or '' when the kernel named no line. */
export function claimedLine(line: number | null | undefined, source: string | null | undefined): string {
  if (typeof line !== 'number' || !Number.isFinite(line)) {
    return source ? `cell line ? (${KERNEL_CLAIM}): ${source}` : '';
  }
  return `cell line ${line} (${KERNEL_CLAIM}): ${source ?? ''}`;
}
