/** The client's two DOM helpers: every string goes in as text (append), never as markup. */

export function byId(id: string): HTMLElement {
  const e = document.getElementById(id);
  if (e === null) throw new Error(`dashboard: #${id} missing`);
  return e;
}

export function el<K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Readonly<Record<string, string>> = {}, ...children: (Node | string)[]): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  for (const c of children) e.append(c);
  return e;
}
