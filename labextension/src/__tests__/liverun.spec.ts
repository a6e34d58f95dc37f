import { ILiveRun, liveRunFacts, verdictOf } from '../liverun';

const UNENDED = { ok: false, problems: [], records: 7, blobs: 0, key_id: null };

function facts(run: ILiveRun, opened: string[] = []): Map<string, HTMLElement> {
  const dl = document.createElement('dl');
  dl.append(...liveRunFacts(run, path => opened.push(path), path => `/lab/tree/${path}`));
  document.body.replaceChildren(dl);
  return new Map([...dl.querySelectorAll<HTMLElement>('dd')].map(dd => [dd.dataset.fact ?? '', dd]));
}

describe('the verify verdict', () => {
  it('says "still running" for a run a live kernel still records, never a failure', () => {
    const verdict = verdictOf({ ...UNENDED, running: true });
    expect(verdict.state).toBe('live');
    expect(verdict.text).toMatch(/^still running: the record so far matches its journal \(7 records\)/);
    expect(verdict.text).not.toContain('FAILED');
  });

  it('still fails a running run on any other problem, and an ended one as before', () => {
    const forged = verdictOf({ ...UNENDED, running: true, problems: ['cell 1 differs from the journal'] });
    expect(forged).toEqual({ state: 'failed', text: 'FAILED (the run is still going):\ncell 1 differs from the journal' });
    const stopped = verdictOf({ ...UNENDED, problems: ['the journal ends at record 7 (cell-finished) without ...'] });
    expect(stopped.state).toBe('failed');
    expect(verdictOf({ ok: true, problems: [], records: 9, blobs: 1, key_id: 'k1' }).text).toBe(
      "verified: matches its journal; 9 records signed with this host's key k1; 1 result blob(s) match their sha256"
    );
  });
});

describe('a live cellgate kernel in the run panel', () => {
  const running: ILiveRun = {
    cellgate: true, state: 'running', notebook: '/srv/root/live/runs/a.ipynb', path: 'live/runs/a.ipynb', ended: null
  };

  it('links the audit notebook under the root, and opens it in Lab when clicked', () => {
    const opened: string[] = [];
    const shown = facts(running, opened);
    const link = shown.get('audit notebook')!.querySelector('a')!;
    expect(link.textContent).toBe('live/runs/a.ipynb');
    expect(link.getAttribute('href')).toBe('/lab/tree/live/runs/a.ipynb');
    expect(link.title).toBe('open /srv/root/live/runs/a.ipynb as a record');
    link.click();
    expect(opened).toEqual(['live/runs/a.ipynb']);
    expect(shown.get('run')!.textContent).toBe('still running');
  });

  it('shows an audit notebook outside the root as text, with no link', () => {
    const shown = facts({ ...running, notebook: '/var/audit/<b>a</b>.ipynb', path: null });
    expect(shown.get('audit notebook')!.querySelector('a, b')).toBeNull();
    expect(shown.get('audit notebook')!.textContent).toBe(
      "/var/audit/<b>a</b>.ipynb (outside the server's root: not opened here)"
    );
  });

  it('says what it knows before the launcher has said, and why it does not when the state is not trusted', () => {
    expect(facts({ cellgate: true, state: 'starting', notebook: null, path: null }).get('run')!.textContent).toBe(
      'starting: the sandbox is not recording yet'
    );
    const untrusted = facts({ cellgate: true, state: 'unknown', problem: 'the state folder has mode 755' });
    expect(untrusted.get('run')!.textContent).toBe('the state folder has mode 755');
    expect(untrusted.get('audit notebook')!.textContent).toBe('not known yet');
  });
});
