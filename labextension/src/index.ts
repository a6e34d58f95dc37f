/** The cellgate plugins: audit notebooks as records with status badges, the run panel, pending approvals. */

import { ILabShell, JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { INotebookTracker } from '@jupyterlab/notebook';
import { checkIcon, listIcon } from '@jupyterlab/ui-components';

import { ApprovalsPanel } from './approvals';
import { watchNotebook } from './audit';
import { RunPanel } from './runpanel';

const records: JupyterFrontEndPlugin<void> = {
  id: 'cellgate-jupyterlab:records',
  description: 'Audit notebooks open read-only with no kernel, with a status badge on each cell',
  autoStart: true,
  requires: [INotebookTracker],
  activate: (_app: JupyterFrontEnd, tracker: INotebookTracker) => {
    tracker.widgetAdded.connect((_, panel) => watchNotebook(panel));
  }
};

const panels: JupyterFrontEndPlugin<void> = {
  id: 'cellgate-jupyterlab:panels',
  description: 'The run panel and the pending-approvals panel',
  autoStart: true,
  requires: [INotebookTracker, ILabShell],
  activate: (app: JupyterFrontEnd, tracker: INotebookTracker, shell: ILabShell) => {
    const run = new RunPanel(tracker, path => void app.commands.execute('docmanager:open', { path }));
    run.title.icon = listIcon;
    shell.add(run, 'right', { rank: 900 });
    const approvals = new ApprovalsPanel(tracker);
    approvals.title.icon = checkIcon;
    shell.add(approvals, 'right', { rank: 901 });
  }
};

export default [records, panels];
