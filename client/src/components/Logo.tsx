export function Logo({ size = 24, className = '' }: { size?: number; className?: string }) {
  return (
    <svg width={size} height={size} viewBox="0 0 64 64" className={className} aria-hidden>
      <defs>
        <linearGradient id="cc-logo" x1="0" y1="0" x2="1" y2="1">
          <stop offset="0" stopColor="#34d399" />
          <stop offset="1" stopColor="#0ea5e9" />
        </linearGradient>
      </defs>
      <rect width="64" height="64" rx="14" fill="#18181b" />
      <path d="M44 22a14 14 0 1 0 0 20" fill="none" stroke="url(#cc-logo)" strokeWidth="7" strokeLinecap="round" />
      <path
        d="M30 26l-5 6 5 6M36 26l5 6-5 6"
        fill="none"
        stroke="#e4e4e7"
        strokeWidth="3"
        strokeLinecap="round"
        strokeLinejoin="round"
      />
    </svg>
  )
}
