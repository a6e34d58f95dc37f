/** Calls to the server extension (`cellgate_jupyterlab`), under `<base>/cellgate/`. */

import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

export async function requestAPI<T>(
  endpoint: string,
  init: RequestInit = {},
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<T> {
  const url = URLExt.join(settings.baseUrl, 'cellgate', endpoint);
  const response = await ServerConnection.makeRequest(url, init, settings);
  const body = await response.text();
  let data: any = body;
  try {
    data = body ? JSON.parse(body) : {};
  } catch {
    // not JSON: the text is the message
  }
  if (!response.ok) {
    throw new Error(typeof data === 'object' && data.message ? data.message : String(data).slice(0, 500));
  }
  return data as T;
}

export function query(params: Record<string, string>): string {
  return '?' + new URLSearchParams(params).toString();
}
