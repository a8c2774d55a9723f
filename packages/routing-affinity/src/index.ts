export { prefixBlockHashes, renderChatForPrefix, type ChatMessageText } from "./prefix-blocks.js";
export { PrefixIndex, type PrefixIndexBounds } from "./prefix-index.js";
export { chooseByPrefix, type AffinityCandidate, type AffinityPick } from "./choose-by-prefix.js";
