/** The MIME renderer for the host's calls bundle (`application/vnd.cellgate.calls+json`). */

import { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Widget } from '@lumino/widgets';

import { query, requestAPI } from './api';
import { CALLS_MIME, ICall, parseBundle } from './calls';
import { CallsTable } from './table';

/** A run's blob, as the server read it from the run's own blob folder after its size and sha256 checked out. */
interface IBlobReply {
  text: string;
  truncated: boolean;
  bytes: number;
}

export class RenderedCalls extends Widget implements IRenderMime.IRenderer {
  private readonly table: CallsTable;

  constructor(options: IRenderMime.IRendererOptions) {
    super();
    this.addClass('cg-rendered-calls');
    const resolver = options.resolver;
    this.table = new CallsTable(resolver ? call => fetchBlob(resolver, call) : null);
    this.node.appendChild(this.table.node);
  }

  async renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    this.table.setCalls(parseBundle(model.data[CALLS_MIME]));
  }
}

/** The blob a call names, resolved beside the notebook and read through the server (never fetched directly). */
async function fetchBlob(resolver: IRenderMime.IResolver, call: ICall): Promise<string> {
  const path = decodeURI(await resolver.resolveUrl(call.resultBlob)).replace(/^\/+/, '');
  const reply = await requestAPI<IBlobReply>(
    'blob' + query({ path, sha256: call.resultSha256, bytes: String(call.resultBytes ?? '') })
  );
  return reply.truncated ? `${reply.text}\n… (${reply.bytes.toLocaleString('en')} bytes in all)` : reply.text;
}

export const rendererFactory: IRenderMime.IRendererFactory = {
  safe: true, // it shows text only: fine for an untrusted notebook
  mimeTypes: [CALLS_MIME],
  defaultRank: 10, // before the text/html fallback beside it
  createRenderer: options => new RenderedCalls(options)
};

const extension: IRenderMime.IExtension = {
  id: 'cellgate-jupyterlab:calls',
  rendererFactory,
  rank: 10,
  dataType: 'json'
};

export default extension;
