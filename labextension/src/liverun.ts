/**
 * What the run panel says of a run: the server's `cellgate verify` reply as a verdict, and, for a notebook
 * whose live kernel is cellgate's, where that kernel's audit notebook is. The server knows the audit notebook
 * from host state (the launcher's own state file), never from the kernel. Pure DOM, no JupyterLab.
 */

export interface IVerifyReply {
  ok: boolean;
  running?: boolean; // a live kernel of this server still records the run: its journal has not ended yet
  problems: string[];
  records: number;
  blobs: number;
  key_id: string | null;
}

export interface ILiveRun {
  cellgate: boolean;
  state?: 'starting' | 'running' | 'restarting' | 'unknown';
  notebook?: string | null; // the audit notebook's absolute path on the server's host
  path?: string | null; // the same relative to the server's root, when it is under it (for a link)
  ended?: string | null;
  problem?: string | null;
}

export interface IVerdict {
  state: 'ok' | 'failed' | 'live';
  text: string;
}

export function verdictOf(reply: IVerifyReply): IVerdict {
  const problems = Array.isArray(reply.problems) ? reply.problems.map(String) : [];
  if (reply.running === true && problems.length === 0) {
    return {
      state: 'live',
      text:
        `still running: the record so far matches its journal (${reply.records} records); ` +
        'cellgate verify passes once the run has ended'
    };
  }
  if (reply.ok && problems.length === 0) {
    return {
      state: 'ok',
      text:
        `verified: matches its journal; ${reply.records} records signed with this host's key ` +
        `${reply.key_id}; ${reply.blobs} result blob(s) match their sha256`
    };
  }
  const going = reply.running === true ? ' (the run is still going)' : '';
  return { state: 'failed', text: `FAILED${going}:\n${problems.join('\n')}` };
}

/** The run's state in words: a run that is going says "still running", never a failure. */
export function liveStateText(run: ILiveRun): string {
  switch (run.state) {
    case 'running':
      return 'still running';
    case 'starting':
      return 'starting: the sandbox is not recording yet';
    case 'restarting':
      return `restarting (the last kernel process ended: ${String(run.ended ?? 'unknown')})`;
    default:
      return run.problem ? String(run.problem) : 'unknown';
  }
}

/** The `<dt>`/`<dd>` pairs for a live cellgate kernel: its audit notebook (a link when under the root) and state. */
export function liveRunFacts(
  run: ILiveRun,
  open: (path: string) => void,
  href: (path: string) => string
): HTMLElement[] {
  const nodes: HTMLElement[] = [];
  const fact = (label: string, value: HTMLElement): void => {
    const dt = document.createElement('dt');
    dt.textContent = label;
    const dd = document.createElement('dd');
    dd.dataset.fact = label;
    dd.appendChild(value);
    nodes.push(dt, dd);
  };
  const notebook = typeof run.notebook === 'string' ? run.notebook : '';
  const path = typeof run.path === 'string' && run.path ? run.path : '';
  if (path) {
    const link = document.createElement('a');
    link.className = 'cg-audit-link';
    link.href = href(path);
    link.textContent = path;
    link.title = `open ${notebook || path} as a record`;
    link.addEventListener('click', event => {
      event.preventDefault();
      open(path);
    });
    fact('audit notebook', link);
  } else {
    const text = document.createElement('span');
    text.className = 'cg-audit-path';
    text.textContent = notebook ? `${notebook} (outside the server's root: not opened here)` : 'not known yet';
    fact('audit notebook', text);
  }
  const state = document.createElement('span');
  state.className = `cg-live-state cg-live-${run.state ?? 'unknown'}`;
  state.textContent = liveStateText(run);
  fact('run', state);
  return nodes;
}
